package proxy

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/classify"
)

// TestCancelPIDs: the PIDs a unit cancels, from constants and from the
// Bind's parameters in text and binary format.
func TestCancelPIDs(t *testing.T) {
	c := classify.New(classify.Options{})
	dec := func(sql string) *classified { return &classified{Decision: c.Classify(sql), text: sql} }
	bind := func(formats []int16, params ...[]byte) []byte {
		b, err := (&pgproto3.Bind{ParameterFormatCodes: formats, Parameters: params}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b[5:] // the body
	}
	be32 := binary.BigEndian.AppendUint32(nil, 4242)
	be64 := binary.BigEndian.AppendUint64(nil, 4243)
	for _, tc := range []struct {
		name string
		sql  string
		bind []byte
		want []uint32
	}{
		{"constant, simple protocol", "select pg_cancel_backend(77)", nil, []uint32{77}},
		{"parameter, no Bind yet", "select pg_cancel_backend($1)", nil, nil},
		{"text parameter", "select pg_cancel_backend($1)", bind(nil, []byte("4242")), []uint32{4242}},
		{"binary int4", "select pg_cancel_backend($1)", bind([]int16{1}, be32), []uint32{4242}},
		{"binary int8, per-parameter formats", "select pg_cancel_backend($2)", bind([]int16{0, 1}, []byte("x"), be64), []uint32{4243}},
		{"NULL", "select pg_cancel_backend($1)", bind(nil, nil), nil},
		{"not a number", "select pg_cancel_backend($1)", bind(nil, []byte("abc")), nil},
		{"negative", "select pg_cancel_backend($1)", bind(nil, []byte("-5")), nil},
		{"missing parameter", "select pg_cancel_backend($3)", bind(nil, []byte("1")), nil},
		{"malformed Bind", "select pg_cancel_backend($1)", []byte{0, 0, 0xff}, nil},
		{"no call", "select 1", bind(nil), nil},
	} {
		if got := cancelPIDs(nil, dec(tc.sql), tc.bind); !slices.Equal(got, tc.want) {
			t.Errorf("%s: cancelPIDs(%q) = %v; want %v", tc.name, tc.sql, got, tc.want)
		}
	}
}
