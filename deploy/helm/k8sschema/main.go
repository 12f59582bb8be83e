// Command k8sschema writes the JSON schemas kubeconform validates Kubernetes
// manifests against, one file per kind, from sources that are reachable
// offline through the Go module proxy: the OpenAPI v2 document of
// Kubernetes (api/openapi-spec/swagger.json in the k8s.io/kubernetes
// module) and CustomResourceDefinition YAML files (the Prometheus Operator's
// CRDs in its module's example/prometheus-operator-crd). kubeconform's own
// default, schemas downloaded from GitHub, cannot be reached here.
//
//	go run ./deploy/helm/k8sschema -swagger swagger.json -crd a.yaml,b.yaml -out DIR
//
// Each schema is standalone (every $ref inlined) and strict: an object
// schema with properties and no additionalProperties gets
// additionalProperties: false, so that an unknown or misspelt field is an
// error, unless the node says x-kubernetes-preserve-unknown-fields. Files
// are named as kubeconform's -schema-location template
// "DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json" expects: the kind in lower
// case, then -GROUP-VERSION with the group's first label (core: -VERSION),
// e.g. deployment-apps-v1.json, service-v1.json,
// servicemonitor-monitoring-v1.json. scripts/check-helm.sh runs it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

func main() {
	swagger := flag.String("swagger", "", "Kubernetes OpenAPI v2 document (swagger.json)")
	crds := flag.String("crd", "", "comma-separated CustomResourceDefinition YAML files")
	out := flag.String("out", "", "directory to write the schemas to")
	flag.Parse()
	if *out == "" || (*swagger == "" && *crds == "") {
		fmt.Fprintln(os.Stderr, "usage: k8sschema -out DIR [-swagger swagger.json] [-crd a.yaml,b.yaml]")
		os.Exit(2)
	}
	n, err := run(*swagger, *crds, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sschema:", err)
		os.Exit(1)
	}
	fmt.Printf("k8sschema: %d schemas in %s\n", n, *out)
}

func run(swaggerPath, crdList, out string) (int, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	schemas := map[string]any{}
	if swaggerPath != "" {
		if err := fromSwagger(swaggerPath, schemas); err != nil {
			return 0, err
		}
	}
	if crdList != "" {
		for _, p := range strings.Split(crdList, ",") {
			if err := fromCRD(p, schemas); err != nil {
				return 0, err
			}
		}
	}
	if len(schemas) == 0 {
		return 0, errors.New("no schema found in the inputs")
	}
	for name, s := range schemas {
		b, err := json.Marshal(s)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return 0, err
		}
	}
	return len(schemas), nil
}

// fileName is kubeconform's name for the schema of kind in group/version.
func fileName(group, version, kind string) string {
	suffix := "-" + strings.ToLower(version)
	if group != "" {
		suffix = "-" + strings.ToLower(strings.Split(group, ".")[0]) + suffix
	}
	return strings.ToLower(kind) + suffix + ".json"
}

func fromSwagger(path string, schemas map[string]any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Definitions) == 0 {
		return fmt.Errorf("%s: no definitions", path)
	}
	x := expander{defs: doc.Definitions, onStack: map[string]bool{}}
	for name, def := range doc.Definitions {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if version == "" || kind == "" {
				return fmt.Errorf("%s: definition %s: incomplete x-kubernetes-group-version-kind %v", path, name, gvk)
			}
			x.onStack[name] = true
			s := x.schema(def)
			x.onStack[name] = false
			schemas[fileName(group, version, kind)] = s
		}
	}
	return nil
}

func fromCRD(path string, schemas map[string]any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Group string `yaml:"group"`
			Names struct {
				Kind string `yaml:"kind"`
			} `yaml:"names"`
			Versions []struct {
				Name   string `yaml:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Spec.Names.Kind == "" {
		return fmt.Errorf("%s: not a CustomResourceDefinition", path)
	}
	x := expander{onStack: map[string]bool{}}
	for _, v := range crd.Spec.Versions {
		if v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("%s: version %s has no openAPIV3Schema", path, v.Name)
		}
		schemas[fileName(crd.Spec.Group, v.Name, crd.Spec.Names.Kind)] = x.schema(v.Schema.OpenAPIV3Schema)
	}
	return nil
}

// expander inlines $refs and makes object schemas strict.
type expander struct {
	defs    map[string]map[string]any
	onStack map[string]bool // definitions being expanded: a recursive $ref becomes {}
}

const refPrefix = "#/definitions/"

func intOrString() map[string]any {
	return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
}

// schema returns a copy of node with its $refs inlined and strictness added.
func (x *expander) schema(node map[string]any) map[string]any {
	if ref, ok := node["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, refPrefix)
		switch name {
		case "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
			return intOrString()
		case "io.k8s.apimachinery.pkg.api.resource.Quantity":
			// "500m" or 2: YAML gives a plain number for the latter.
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
		}
		def, ok := x.defs[name]
		if !ok || x.onStack[name] {
			return map[string]any{} // unknown or recursive (JSONSchemaProps): anything goes
		}
		x.onStack[name] = true
		defer func() { x.onStack[name] = false }()
		return x.schema(def)
	}
	if b, _ := node["x-kubernetes-int-or-string"].(bool); b || node["format"] == "int-or-string" {
		return intOrString()
	}
	out := make(map[string]any, len(node)+1)
	for k, v := range node {
		switch k {
		case "properties", "patternProperties", "definitions":
			m, _ := v.(map[string]any)
			props := make(map[string]any, len(m))
			for name, p := range m {
				props[name] = x.any(p)
			}
			out[k] = props
		case "items", "additionalProperties", "not":
			out[k] = x.any(v)
		case "allOf", "anyOf", "oneOf":
			l, _ := v.([]any)
			subs := make([]any, len(l))
			for i, s := range l {
				subs[i] = x.any(s)
			}
			out[k] = subs
		default:
			out[k] = v
		}
	}
	if _, ok := out["properties"]; ok {
		if _, set := out["additionalProperties"]; !set {
			if keep, _ := out["x-kubernetes-preserve-unknown-fields"].(bool); !keep {
				out["additionalProperties"] = false
			}
		}
	}
	return out
}

// any expands a schema given as a value: a map, or a boolean schema.
func (x *expander) any(v any) any {
	if m, ok := v.(map[string]any); ok {
		return x.schema(m)
	}
	return v
}
