package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestFileName(t *testing.T) {
	for _, c := range []struct{ group, version, kind, want string }{
		{"", "v1", "Service", "service-v1.json"},
		{"apps", "v1", "Deployment", "deployment-apps-v1.json"},
		{"monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrule-monitoring-v1.json"},
	} {
		if got := fileName(c.group, c.version, c.kind); got != c.want {
			t.Errorf("fileName(%q, %q, %q) = %q, want %q", c.group, c.version, c.kind, got, c.want)
		}
	}
}

// A small OpenAPI v2 document: refs are inlined, objects made strict,
// IntOrString becomes string-or-integer, a recursive ref becomes {}.
func TestFromSwagger(t *testing.T) {
	doc := `{"definitions": {
	  "x.Thing": {"type": "object",
	    "x-kubernetes-group-version-kind": [{"group": "things.example.com", "version": "v2", "kind": "Thing"}],
	    "properties": {"spec": {"$ref": "#/definitions/x.Spec"}, "kind": {"type": "string"}}},
	  "x.Spec": {"type": "object", "properties": {
	    "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
	    "child": {"$ref": "#/definitions/x.Spec"},
	    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}}}}
	}}`
	dir := t.TempDir()
	in := filepath.Join(dir, "swagger.json")
	if err := os.WriteFile(in, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	n, err := run(in, "", out)
	if err != nil || n != 1 {
		t.Fatalf("run = %d, %v; want 1 schema", n, err)
	}
	b, err := os.ReadFile(filepath.Join(out, "thing-things-v2.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(`{"type": "object", "additionalProperties": false,
	  "x-kubernetes-group-version-kind": [{"group": "things.example.com", "version": "v2", "kind": "Thing"}],
	  "properties": {"kind": {"type": "string"}, "spec": {"type": "object", "additionalProperties": false, "properties": {
	    "port": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
	    "child": {},
	    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}}}}}}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema:\n got %s\nwant %v", b, want)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(in, []byte(`{"definitions": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(in, "", filepath.Join(dir, "out")); err == nil {
		t.Error("run accepted a document with no definitions")
	}
	crd := filepath.Join(dir, "crd.yaml")
	if err := os.WriteFile(crd, []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run("", crd, filepath.Join(dir, "out")); err == nil {
		t.Error("run accepted a ConfigMap as a CRD")
	}
}
