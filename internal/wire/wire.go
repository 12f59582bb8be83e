// Package wire frames PostgreSQL protocol 3.0 messages on buffered streams
// without decoding them, so the proxy can relay rows as bytes. Messages the
// proxy must understand are decoded with pgproto3 from the body slices this
// package returns. Nothing here is safe for concurrent use on one stream.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Limits on message bodies, mirroring PostgreSQL's own: control messages are
// tiny, anything else may be up to 1 GiB (PQ_LARGE_MESSAGE_LIMIT). A body
// above the limit is a protocol violation; the proxy never allocates for it.
const (
	MaxStartupLen    = 10000 // MAX_STARTUP_PACKET_LENGTH
	MaxSmallBodyLen  = 10000 // PQ_SMALL_MESSAGE_LIMIT
	MaxLargeBodyLen  = 1<<30 - 1
	HeaderLen        = 5
	startupHeaderLen = 4
)

// ErrMessageTooLarge is returned when a declared length exceeds its limit.
var ErrMessageTooLarge = errors.New("message length exceeds limit")

// ErrBadLength is returned for a length below the 4 bytes of the length field.
var ErrBadLength = errors.New("invalid message length")

// Header is a message's type byte and body length (without the length field).
type Header struct {
	Type byte
	Len  int
}

// ReadHeader reads the 5-byte header of a regular message.
func ReadHeader(r *bufio.Reader) (Header, error) {
	b, err := r.Peek(HeaderLen)
	if err != nil {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Header{}, err
	}
	h := Header{Type: b[0], Len: int(binary.BigEndian.Uint32(b[1:5])) - 4}
	if _, err := r.Discard(HeaderLen); err != nil {
		return Header{}, err
	}
	if h.Len < 0 {
		return h, ErrBadLength
	}
	return h, nil
}

// ReadBody reads a body of n bytes into buf (grown if needed) and returns it.
// The caller bounds n before calling.
func ReadBody(r *bufio.Reader, n int, buf []byte) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf, err
	}
	return buf, nil
}

// Discard skips n body bytes.
func Discard(r *bufio.Reader, n int) error {
	_, err := r.Discard(n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// WriteHeader appends a message header to w.
// It writes into w's own buffer: nothing escapes, nothing is allocated.
func WriteHeader(w *bufio.Writer, h Header) error {
	b := w.AvailableBuffer()
	b = append(b, h.Type)
	b = binary.BigEndian.AppendUint32(b, uint32(h.Len+4))
	_, err := w.Write(b)
	return err
}

// WriteError marks a failure of the destination in Copy, so a relay can tell
// which side of it broke.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "write: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Copy relays n body bytes from r to w through r's buffer, without
// allocating: bodies larger than the buffer stream through in chunks. A
// failure to write is returned as *WriteError.
func Copy(w *bufio.Writer, r *bufio.Reader, n int) error {
	for n > 0 {
		k := n
		if b := r.Buffered(); b > 0 && b < k {
			k = b
		} else if k > r.Size() {
			k = r.Size()
		}
		chunk, err := r.Peek(k)
		if len(chunk) > 0 {
			if _, werr := w.Write(chunk); werr != nil {
				return &WriteError{werr}
			}
			r.Discard(len(chunk))
			n -= len(chunk)
		}
		if err != nil && n > 0 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				return err
			}
		}
	}
	return nil
}

// ReadStartup reads an untyped startup-phase packet (StartupMessage,
// SSLRequest, GSSENCRequest, CancelRequest) and returns its body, starting
// with the 4-byte protocol code.
func ReadStartup(r *bufio.Reader, buf []byte) ([]byte, error) {
	b, err := r.Peek(startupHeaderLen)
	if err != nil {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(b)) - 4
	if n < 4 || n > MaxStartupLen {
		return nil, fmt.Errorf("%w: startup packet length %d", ErrBadLength, n+4)
	}
	r.Discard(startupHeaderLen)
	return ReadBody(r, n, buf)
}

// Encoder is implemented by every pgproto3 message.
type Encoder interface {
	Encode(dst []byte) ([]byte, error)
}

// Append encodes msgs onto dst.
func Append(dst []byte, msgs ...Encoder) ([]byte, error) {
	var err error
	for _, m := range msgs {
		if dst, err = m.Encode(dst); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
