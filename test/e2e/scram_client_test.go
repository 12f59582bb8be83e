package e2e

import (
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// startupAs performs a StartupMessage and SCRAM-SHA-256 login on a raw
// connection, then waits for ReadyForQuery.
func startupAs(nc net.Conn, fe *pgproto3.Frontend, user, password, db string, version uint32) error {
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: version, Parameters: map[string]string{"user": user, "database": db}})
	if err := fe.Flush(); err != nil {
		return err
	}
	client, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		return err
	}
	conv := client.NewConversation()
	for {
		m, err := fe.Receive()
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *pgproto3.NegotiateProtocolVersion:
		case *pgproto3.AuthenticationSASL:
			first, _ := conv.Step("")
			fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte(first)})
			if err := fe.Flush(); err != nil {
				return err
			}
		case *pgproto3.AuthenticationSASLContinue:
			final, err := conv.Step(string(m.Data))
			if err != nil {
				return err
			}
			fe.Send(&pgproto3.SASLResponse{Data: []byte(final)})
			if err := fe.Flush(); err != nil {
				return err
			}
		case *pgproto3.AuthenticationSASLFinal:
			if _, err := conv.Step(string(m.Data)); err != nil {
				return fmt.Errorf("server signature: %w", err)
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("%s: %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return nil
		}
	}
}
