package inputs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sizes at scale 1 (input A).
const (
	// JSONBaseBytes: json's document, Table 2's 13 KB (B is 11.4x: 148 KB).
	JSONBaseBytes = 13_000
	// CompressionBaseBytes: compression's file, Table 2's 13 KB (B 148 KB).
	CompressionBaseBytes = 13_000
	// PyaesBaseBytes: the message pyaes encrypts. The paper's is 20k
	// characters; pure-Python AES under TCG is ~10x slower, so 8 KiB.
	PyaesBaseBytes = 8192
	// ChameleonBaseRows × ChameleonCols cells: the paper's tables are 30k
	// cells (100×300); 3000 here, for TCG.
	ChameleonBaseRows = 250
	ChameleonCols     = 12
)

var words = strings.Fields(`
the of and to a in is it you that he was for on are with as his they be at one have
this from or had by hot word but what some we can out other were all there when up use
your how said an each she which do their time if will way about many then them write
would like so these her long make thing see him two has look more day could go come did
number sound no most people my over know water than call first who may down side been now
find any new work part take get place made live where after back little only round man year
came show every good me give our under name very through just form sentence great think say
help low line differ turn cause much mean before move right boy old too same tell does set
three want air well also play small end put home read hand port large spell add even land
here must big high such follow act why ask men change went light kind off need house picture
try us again animal point mother world near build self earth father head stand own page should
country found answer school grow study still learn plant cover food sun four between state keep
eye never last let thought city tree cross farm hard start might story saw far sea draw left
late run while press close night real life few north open seem together next white children
begin got walk example ease paper group always music those both mark often letter until mile
river car feet care second book carry took science eat room friend began idea fish mountain
stop once base hear horse cut sure watch color face wood main enough plain girl usual young
ready above ever red list though feel talk bird soon body dog family direct pose leave song
measure door product black short numeral class wind question happen complete ship area half
rock order fire south problem piece told knew pass since top whole king space heard best hour
better true during hundred five remember step early hold west ground interest reach fast verb
sing listen six table travel less morning ten simple several vowel toward war lay against
pattern slow center love person money serve appear road map rain rule govern pull cold notice
voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star
box noun field rest correct able pound done beauty drive stood contain front teach week final
gave green oh quick develop ocean warm free minute strong special mind behind clear tail produce
fact street inch multiply nothing course stay wheel full force blue object decide surface deep
moon island foot system busy test record boat common gold possible plane stead dry wonder laugh
thousand ago ran check game shape equate miss brought heat snow tire bring yes distant fill
east paint language among grand ball yet wave drop heart am present heavy dance engine position
arm wide sail material size vary settle speak weight general ice matter circle pair include
divide syllable felt perhaps pick sudden count square reason length represent art subject region
energy hunt probable bed brother egg ride cell believe fraction forest sit race window store
summer train sleep prove lone leg exercise wall catch mount wish sky board joy winter sat written
`)

// textGen writes English-like text: Zipf-distributed words in sentences and
// paragraphs, lines wrapped at 72 columns, with the odd number and hex
// token. Deflate compresses it roughly 2.5-3x.
type textGen struct {
	p    *prng
	z    *zipf
	buf  bytes.Buffer
	line int // columns used on the current line
}

func newTextGen(p *prng) *textGen { return &textGen{p: p, z: newZipf(len(words))} }

func (g *textGen) word(s string) {
	if g.line > 0 {
		if g.line+1+len(s) > 72 {
			g.buf.WriteByte('\n')
			g.line = 0
		} else {
			g.buf.WriteByte(' ')
			g.line++
		}
	}
	g.buf.WriteString(s)
	g.line += len(s)
}

func (g *textGen) sentence() {
	n := g.p.between(5, 20)
	for i := range n {
		var w string
		switch {
		case g.p.chance(1, 40):
			w = strconv.Itoa(g.p.intn(100000))
		case g.p.chance(1, 60):
			w = fmt.Sprintf("0x%08x", uint32(g.p.u64()))
		default:
			w = words[g.z.draw(g.p)]
		}
		if i == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		if i == n-1 {
			if g.p.chance(1, 12) {
				w += "?"
			} else {
				w += "."
			}
		} else if g.p.chance(1, 10) {
			w += ","
		}
		g.word(w)
	}
}

func (g *textGen) paragraph() {
	for range g.p.between(2, 7) {
		g.sentence()
	}
	g.buf.WriteString("\n\n")
	g.line = 0
}

// text returns exactly n bytes.
func (g *textGen) text(n int) []byte {
	for g.buf.Len() < n {
		g.paragraph()
	}
	return g.buf.Bytes()[:n]
}

func genPyaes(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	return newTextGen(p).text(scaled(PyaesBaseBytes, scale, 16)), Meta{}, nil
}

func genCompression(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	return newTextGen(p).text(scaled(CompressionBaseBytes, scale, 16)), Meta{}, nil
}

var (
	firstNames = strings.Fields("Olivia Liam Emma Noah Ava Elijah Sophia Lucas Mia Mateo Amelia Levi Harper Ezra Luna Asher Aria Leo Chloe Kai Nora Ivan Mei Ravi Sofia Jonas Aiko Omar Ines Tariq Freya Diego Zara Kofi Lena Arjun Yara")
	lastNames  = strings.Fields("Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark Ramirez Lewis Robinson Nakamura Okafor Novak Larsen Rossi Singh Kowalski")
	cities     = []struct{ City, Country string }{
		{"Lisbon", "PT"}, {"Osaka", "JP"}, {"Lagos", "NG"}, {"Denver", "US"}, {"Lyon", "FR"}, {"Pune", "IN"},
		{"Leeds", "GB"}, {"Krakow", "PL"}, {"Austin", "US"}, {"Porto", "PT"}, {"Quito", "EC"}, {"Tartu", "EE"},
		{"Perth", "AU"}, {"Bergen", "NO"}, {"Seville", "ES"}, {"Nairobi", "KE"}, {"Graz", "AT"}, {"Busan", "KR"},
	}
	streets  = strings.Fields("Oak Maple Cedar Elm Pine Birch Willow Harbor Mill Church Station Park Lake Hill River Garden")
	suffixes = strings.Fields("Street Avenue Road Lane Way Court Place")
	tags     = strings.Fields("new vip returning wholesale newsletter beta mobile enterprise trial referral gift churn-risk")
	products = strings.Fields("widget gadget sprocket gizmo flange bracket gear spindle valve coupler hinge lever")
	statuses = strings.Fields("pending paid shipped delivered returned cancelled")
	domains  = strings.Fields("example.com mail.test post.example.org inbox.example.net")
)

// money is an amount in cents, encoded as a JSON number with two decimals
// (formatted from integers, so no float rounding is involved).
type money int64

func (m money) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%d.%02d", m/100, m%100)), nil
}

// coord is a latitude or longitude in 1e-4 degrees.
type coord int64

func (c coord) MarshalJSON() ([]byte, error) {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return []byte(fmt.Sprintf("%s%d.%04d", sign, c/10000, c%10000)), nil
}

type jsonGeo struct {
	Lat coord `json:"lat"`
	Lon coord `json:"lon"`
}

type jsonAddress struct {
	Street  string  `json:"street"`
	City    string  `json:"city"`
	Country string  `json:"country"`
	Zip     string  `json:"zip"`
	Geo     jsonGeo `json:"geo"`
}

type jsonOrder struct {
	ID     string `json:"id"`
	SKU    string `json:"sku"`
	Qty    int    `json:"qty"`
	Price  money  `json:"price"`
	Status string `json:"status"`
	Date   string `json:"date"`
}

type jsonFriend struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

type jsonRecord struct {
	ID         int          `json:"id"`
	GUID       string       `json:"guid"`
	Active     bool         `json:"active"`
	Name       string       `json:"name"`
	Email      string       `json:"email"`
	Phone      string       `json:"phone"`
	Age        int          `json:"age"`
	Balance    money        `json:"balance"`
	Registered string       `json:"registered"`
	Address    jsonAddress  `json:"address"`
	Tags       []string     `json:"tags"`
	Friends    []jsonFriend `json:"friends"`
	Orders     []jsonOrder  `json:"orders"`
	About      string       `json:"about"`
}

type jsonDoc struct {
	Source  string       `json:"source"`
	Variant string       `json:"variant"`
	Version int          `json:"version"`
	Count   int          `json:"count"`
	Records []jsonRecord `json:"records"`
}

func date(p *prng) string {
	// 2015-01-01 .. ~2023, UTC
	return time.Unix(1420070400+int64(p.intn(8*365*86400)), 0).UTC().Format(time.RFC3339)
}

func person(p *prng) string { return p.pick(firstNames) + " " + p.pick(lastNames) }

func record(p *prng, tg *textGen, id int) jsonRecord {
	name := person(p)
	first, last, _ := strings.Cut(name, " ")
	c := cities[p.intn(len(cities))]
	r := jsonRecord{
		ID:         id,
		GUID:       fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", uint32(p.u64()), p.intn(1<<16), p.intn(1<<12), 0x8000|p.intn(1<<14), p.u64()>>16),
		Active:     p.chance(3, 4),
		Name:       name,
		Email:      strings.ToLower(first+"."+last) + "@" + p.pick(domains),
		Phone:      fmt.Sprintf("+%d %03d %03d %04d", p.between(1, 99), p.intn(1000), p.intn(1000), p.intn(10000)),
		Age:        p.between(18, 90),
		Balance:    money(p.intn(5_000_000)),
		Registered: date(p),
		Address: jsonAddress{
			Street:  fmt.Sprintf("%d %s %s", p.between(1, 999), p.pick(streets), p.pick(suffixes)),
			City:    c.City,
			Country: c.Country,
			Zip:     fmt.Sprintf("%05d", p.intn(100000)),
			Geo:     jsonGeo{Lat: coord(p.between(-900000, 900000)), Lon: coord(p.between(-1800000, 1800000))},
		},
	}
	for range p.intn(4) {
		r.Tags = append(r.Tags, p.pick(tags))
	}
	if r.Tags == nil {
		r.Tags = []string{}
	}
	r.Friends = []jsonFriend{}
	for range p.intn(4) {
		r.Friends = append(r.Friends, jsonFriend{ID: p.intn(100000), Name: person(p)})
	}
	r.Orders = []jsonOrder{}
	for range p.intn(4) {
		r.Orders = append(r.Orders, jsonOrder{
			ID:     fmt.Sprintf("o-%06d", p.intn(1000000)),
			SKU:    fmt.Sprintf("%s-%03d", p.pick(products), p.intn(1000)),
			Qty:    p.between(1, 12),
			Price:  money(p.between(99, 49999)),
			Status: p.pick(statuses),
			Date:   date(p),
		})
	}
	tg.buf.Reset()
	tg.line = 0
	tg.sentence()
	r.About = strings.ReplaceAll(tg.buf.String(), "\n", " ")
	return r
}

// genJSON writes {"source", "variant", "version", "count", "records": [...]}
// indented by two spaces, adding records until the document reaches
// round(JSONBaseBytes*scale) bytes (it ends within one record of that).
func genJSON(p *prng, variant string, scale float64) ([]byte, Meta, error) {
	target := scaled(JSONBaseBytes, scale, 1)
	doc := jsonDoc{Source: "thaw synthetic customer records", Variant: variant, Version: 1}
	tg := newTextGen(p)
	size := 150 // the envelope, approximately
	for size < target {
		r := record(p, tg, len(doc.Records)+1)
		b, err := json.MarshalIndent(r, "    ", "  ")
		if err != nil {
			return nil, Meta{}, err
		}
		size += len(b) + 6 // indentation, ",\n"
		doc.Records = append(doc.Records, r)
	}
	doc.Count = len(doc.Records)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, Meta{}, err
	}
	return append(out, '\n'), Meta{Records: doc.Count}, nil
}

// ChameleonColumns are the table's column names.
var ChameleonColumns = []string{"id", "name", "email", "city", "country", "product", "qty", "unit_price", "total", "date", "status", "score"}

// genChameleon writes {"title": str, "header": [column names], "rows":
// [[cell, ...], ...]} (what functions/chameleon renders): round(
// ChameleonBaseRows*scale) rows of mixed strings and numbers, one per line.
// Product names carry "&" and some notes "<...>", which need HTML escaping.
func genChameleon(p *prng, variant string, scale float64) ([]byte, Meta, error) {
	rows := scaled(ChameleonBaseRows, scale, 1)
	var b bytes.Buffer
	title, _ := json.Marshal(fmt.Sprintf("thaw orders, input %s, %d rows", variant, rows))
	cols, _ := json.Marshal(ChameleonColumns)
	b.WriteString(`{"title": `)
	b.Write(title)
	b.WriteString(",\n \"header\": ")
	b.Write(cols)
	b.WriteString(",\n \"rows\": [\n")
	for i := range rows {
		name := person(p)
		first, last, _ := strings.Cut(name, " ")
		c := cities[p.intn(len(cities))]
		qty := p.between(1, 20)
		price := money(p.between(99, 19999))
		product := fmt.Sprintf("%s-%03d", p.pick(products), p.intn(1000))
		if p.chance(1, 8) {
			product = p.pick(products) + " & " + product
		}
		status := p.pick(statuses)
		if p.chance(1, 10) {
			status = "<" + status + ">"
		}
		row := []any{
			i + 1, name, strings.ToLower(first+"."+last) + "@" + p.pick(domains), c.City, c.Country,
			product, qty, price, money(int64(qty) * int64(price)), date(p)[:10], status, p.intn(1001),
		}
		b.WriteString("  ")
		if err := marshalRaw(&b, row); err != nil {
			return nil, Meta{}, err
		}
		if i < rows-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(" ]}\n")
	return b.Bytes(), Meta{Rows: rows, Cols: len(ChameleonColumns)}, nil
}

// marshalRaw appends v's JSON without HTML escaping ("&", "<", ">" stay as
// they are) and without the Encoder's newline.
func marshalRaw(b *bytes.Buffer, v any) error {
	var tmp bytes.Buffer
	enc := json.NewEncoder(&tmp)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Write(bytes.TrimSuffix(tmp.Bytes(), []byte("\n")))
	return nil
}
