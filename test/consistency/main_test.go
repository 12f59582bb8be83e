package consistency

import (
	"testing"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
