// Package helm holds the tests of the Helm chart in kineticd/: its copy of
// the alert rules must stay equal to deploy/alerts.yml. The chart itself is
// linted and validated by scripts/check-helm.sh (make check-helm), and
// k8sschema/ writes the Kubernetes JSON schemas that script validates with.
package helm
