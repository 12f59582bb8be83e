package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FuzzRelayFrames relays any byte stream message by message, as the proxy
// relays a client's messages: every header it accepts is re-encoded to the
// very bytes read (decode→encode round trip), the relayed bytes are a
// prefix of the input, a declared length below 4 is ErrBadLength, a
// truncated header or body is io.ErrUnexpectedEOF, and a clean end is
// io.EOF.
func FuzzRelayFrames(f *testing.F) {
	q, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	f.Add(q)
	parse, _ := (&pgproto3.Parse{Name: "s1", Query: "select $1", ParameterOIDs: []uint32{23}}).Encode(nil)
	parse, _ = (&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("1")}}).Encode(parse)
	parse, _ = (&pgproto3.Execute{}).Encode(parse)
	parse, _ = (&pgproto3.Sync{}).Encode(parse)
	f.Add(parse)
	f.Add([]byte{'X', 0, 0, 0, 4})
	f.Add([]byte{'Q', 0, 0, 0, 3})
	f.Add([]byte{'S', 0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{'Q', 0, 0, 0, 100, 's', 'e', 'l'})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(in), 16)
		var out bytes.Buffer
		w := bufio.NewWriterSize(&out, 16)
		consumed := 0
		for {
			h, err := ReadHeader(r)
			if err != nil {
				rest := in[consumed:]
				switch {
				case len(rest) == 0:
					if err != io.EOF {
						t.Fatalf("clean end: %v, want io.EOF", err)
					}
				case len(rest) < HeaderLen:
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("truncated header %x: %v", rest, err)
					}
				case binary.BigEndian.Uint32(rest[1:5]) < 4:
					if !errors.Is(err, ErrBadLength) {
						t.Fatalf("length %d: %v, want ErrBadLength", binary.BigEndian.Uint32(rest[1:5]), err)
					}
				default:
					t.Fatalf("header %x refused: %v", rest[:HeaderLen], err)
				}
				break
			}
			if err := WriteHeader(w, h); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			if got, want := out.Bytes()[out.Len()-HeaderLen:], in[consumed:consumed+HeaderLen]; !bytes.Equal(got, want) {
				t.Fatalf("header re-encoded as %x, read from %x", got, want)
			}
			consumed += HeaderLen
			if h.Len > MaxSmallBodyLen {
				break // the caller's limit check: the body is never read
			}
			err = Copy(w, r, h.Len)
			w.Flush()
			if err != nil {
				if !errors.Is(err, io.ErrUnexpectedEOF) || len(in)-consumed >= h.Len {
					t.Fatalf("body of %d with %d bytes left: %v", h.Len, len(in)-consumed, err)
				}
				break
			}
			consumed += h.Len
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("relayed bytes are not a prefix of the input:\nin  %x\nout %x", in, out.Bytes())
		}
	})
}

// FuzzReadStartup reads any bytes as a startup-phase packet: a length word
// outside 8..10004 is ErrBadLength (nothing allocated for it), an accepted
// packet's body is exactly the declared bytes, starting with the 4-byte
// code, and pgproto3's StartupMessage decoding of it re-encodes to a
// packet that decodes the same (the proxy reads user, database and
// options from that map).
func FuzzReadStartup(f *testing.F) {
	sm, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "app", "database": "app", "options": "-c search_path=x"}}).Encode(nil)
	f.Add(sm)
	f.Add([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f})                          // SSLRequest
	f.Add([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30})                          // GSSENCRequest
	f.Add([]byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2}) // CancelRequest
	f.Add([]byte{0, 0, 0, 12, 0, 3, 0, 2, 'u', 0, 'x', 0})                     // protocol 3.2
	f.Add([]byte{0, 0, 0, 8, 0, 2, 0, 0})                                      // protocol 2.0
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0})                          // huge
	f.Add([]byte{0, 0, 0, 4})                                                  // too small
	f.Add([]byte{'X', 0, 0, 0, 4})                                             // Terminate
	f.Add([]byte{0, 0, 0, 40, 0, 3, 0, 0, 'u', 's'})                           // truncated
	f.Fuzz(func(t *testing.T, in []byte) {
		body, err := ReadStartup(bufio.NewReaderSize(bytes.NewReader(in), 16), nil)
		if len(in) < 4 {
			if err == nil {
				t.Fatal("accepted a packet without a length word")
			}
			return
		}
		n := int64(binary.BigEndian.Uint32(in))
		switch {
		case n < 8 || n > MaxStartupLen+4:
			if !errors.Is(err, ErrBadLength) {
				t.Fatalf("length %d: %v, want ErrBadLength", n, err)
			}
			return
		case int64(len(in)) < n:
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("length %d with %d bytes: %v, want ErrUnexpectedEOF", n, len(in), err)
			}
			return
		case err != nil:
			t.Fatalf("length %d refused: %v", n, err)
		}
		if !bytes.Equal(body, in[4:n]) {
			t.Fatalf("body %x, want %x", body, in[4:n])
		}
		var m pgproto3.StartupMessage
		if m.Decode(body) != nil {
			return
		}
		again, err := m.Encode(nil)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", m, err)
		}
		var m2 pgproto3.StartupMessage
		if err := m2.Decode(again[4:]); err != nil || m2.ProtocolVersion != m.ProtocolVersion || len(m2.Parameters) != len(m.Parameters) {
			t.Fatalf("round trip: %+v -> %+v (%v)", m, m2, err)
		}
		for k, v := range m.Parameters {
			if m2.Parameters[k] != v {
				t.Fatalf("round trip: parameter %q %q -> %q", k, v, m2.Parameters[k])
			}
		}
	})
}
