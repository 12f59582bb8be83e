package helm

import (
	"bytes"
	"os"
	"testing"
)

// The chart renders its PrometheusRule from kineticd/files/alerts.yml; the
// rules Prometheus users load directly are deploy/alerts.yml. One must be a
// byte-for-byte copy of the other, or the two deployments alert differently.
func TestChartAlertsEqualDeployAlerts(t *testing.T) {
	want, err := os.ReadFile("../alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("kineticd/files/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/helm/kineticd/files/alerts.yml (%d bytes) differs from deploy/alerts.yml (%d bytes): "+
			"cp deploy/alerts.yml deploy/helm/kineticd/files/alerts.yml", len(got), len(want))
	}
}
