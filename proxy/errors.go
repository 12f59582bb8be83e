package proxy

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATEs the proxy itself reports.
const (
	codeProtocolViolation = "08P01"
	codeObjectNotInState  = "55000"
	codeConnectionFailure = "08006"
	// codeTransactionResolutionUnknown: the connection was lost while a
	// commit was in flight.
	codeTransactionResolutionUnknown = "08007"
	codeInvalidAuthorization         = "28000"
	codeInvalidPassword              = "28P01"
	codeInvalidCatalogName           = "3D000"
	codeTooManyConnections           = "53300"
	codeAdminShutdown                = "57P01"
	codeFeatureNotSupported          = "0A000"
	// codeLostWrite: the session's token lies beyond its timeline's
	// switch point: its last write was lost in a failover (SPEC §7).
	codeLostWrite = "KN002"
)

// clientError is an error that is reported to the client as an
// ErrorResponse. Severity FATAL ends the session.
type clientError struct {
	severity, code, message, detail string
}

func (e *clientError) Error() string { return e.code + ": " + e.message }

func fatalf(code, format string, args ...any) *clientError {
	return &clientError{severity: "FATAL", code: code, message: fmt.Sprintf(format, args...)}
}

func protocolViolation(format string, args ...any) *clientError {
	return fatalf(codeProtocolViolation, format, args...)
}

// errorf is an ErrorResponse of the proxy's own with severity ERROR: the
// statement fails, the session goes on. Every such message the proxy
// makes starts here; callers add Detail or Hint to the result.
func errorf(code, format string, args ...any) *pgproto3.ErrorResponse {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: msg}
}

// withDetail sets e's DETAIL and returns e.
func withDetail(e *pgproto3.ErrorResponse, detail string) *pgproto3.ErrorResponse {
	e.Detail = detail
	return e
}

// withHint sets e's HINT and returns e.
func withHint(e *pgproto3.ErrorResponse, hint string) *pgproto3.ErrorResponse {
	e.Hint = hint
	return e
}

// errorResponse turns err into the message the client sees. A server's own
// error passes through unchanged; internal causes become a generic 08006
// whose detail names the cause without internals.
func errorResponse(err error) *pgproto3.ErrorResponse {
	var ce *clientError
	if errors.As(err, &ce) {
		return &pgproto3.ErrorResponse{Severity: ce.severity, SeverityUnlocalized: ce.severity, Code: ce.code, Message: ce.message, Detail: ce.detail}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &pgproto3.ErrorResponse{
			Severity: pe.Severity, SeverityUnlocalized: pe.SeverityUnlocalized, Code: pe.Code, Message: pe.Message,
			Detail: pe.Detail, Hint: pe.Hint, Position: pe.Position, Where: pe.Where, SchemaName: pe.SchemaName,
			TableName: pe.TableName, ColumnName: pe.ColumnName, DataTypeName: pe.DataTypeName,
			ConstraintName: pe.ConstraintName, File: pe.File, Line: pe.Line, Routine: pe.Routine,
		}
	}
	return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: codeConnectionFailure,
		Message: "pg-kinetic: could not reach the server", Detail: err.Error()}
}
