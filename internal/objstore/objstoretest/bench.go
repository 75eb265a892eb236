package objstoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// Bench measures puts and gets of objects of size bytes (a registry chunk
// is at most 8 MiB, 512 KiB by default) on s, each its own key.
func Bench(b *testing.B, s objstore.Store, size int) {
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("put", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; b.Loop(); i++ {
			if err := s.Put(ctx, fmt.Sprintf("bench/%02x/%d", i%256, i), data, objstore.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(int64(size))
		buf := make([]byte, 0, size)
		key := "bench/get"
		if err := s.Put(ctx, key, data, objstore.PutOptions{}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := s.Get(ctx, key, objstore.GetOptions{Buf: buf}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
