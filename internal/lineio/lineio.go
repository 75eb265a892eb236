// Package lineio reads the newline-delimited JSON of the guest agent's
// channel and of QMP, one bounded line at a time: a peer that never ends a
// line cannot make the host buffer without limit.
package lineio

import (
	"bufio"
	"fmt"
)

// Read returns the next line of rd without its line ending, or an error
// naming what (such as "reply") if the line is longer than max bytes.
func Read(rd *bufio.Reader, max int, what string) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := rd.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > max {
			return nil, fmt.Errorf("%s longer than %d bytes", what, max)
		}
		if !isPrefix {
			return line, nil
		}
	}
}
