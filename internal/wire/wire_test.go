package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

func TestCopyStreamsLargeBodies(t *testing.T) {
	body := bytes.Repeat([]byte("abcdefgh"), 100000) // 800 KB, larger than the buffer
	msg, _ := (&pgproto3.CopyData{Data: body}).Encode(nil)
	msg, _ = (&pgproto3.Sync{}).Encode(msg)
	r := bufio.NewReaderSize(bytes.NewReader(msg), 4096)
	var out bytes.Buffer
	w := bufio.NewWriterSize(&out, 4096)
	for i := 0; i < 2; i++ {
		h, err := ReadHeader(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteHeader(w, h); err != nil {
			t.Fatal(err)
		}
		if err := Copy(w, r, h.Len); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	if !bytes.Equal(out.Bytes(), msg) {
		t.Fatalf("relayed %d bytes differ from the %d sent", out.Len(), len(msg))
	}
}

func TestReadHeaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"truncated header", []byte{'Q', 0, 0}, io.ErrUnexpectedEOF},
		{"length below 4", []byte{'Q', 0, 0, 0, 3}, ErrBadLength},
	} {
		_, err := ReadHeader(bufio.NewReader(bytes.NewReader(tc.in)))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestReadStartupLimits(t *testing.T) {
	huge := []byte{0x7f, 0, 0, 0, 0, 3, 0, 0}
	if _, err := ReadStartup(bufio.NewReader(bytes.NewReader(huge)), nil); !errors.Is(err, ErrBadLength) {
		t.Fatalf("oversized startup packet: got %v", err)
	}
	sm, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}}).Encode(nil)
	body, err := ReadStartup(bufio.NewReader(bytes.NewReader(sm)), nil)
	if err != nil || !strings.Contains(string(body), "user") {
		t.Fatalf("startup: %v %q", err, body)
	}
}

func FuzzFraming(f *testing.F) {
	q, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	f.Add(q)
	f.Add([]byte{'X', 0, 0, 0, 4})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(in), 16)
		w := bufio.NewWriter(io.Discard)
		for {
			h, err := ReadHeader(r)
			if err != nil {
				return
			}
			if h.Len > MaxSmallBodyLen {
				return
			}
			if err := Copy(w, r, h.Len); err != nil {
				return
			}
		}
	})
}
