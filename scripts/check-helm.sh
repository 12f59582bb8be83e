#!/usr/bin/env bash
# check-helm.sh — `make check-helm`: lint the Helm chart deploy/helm/kineticd
# and validate what it renders, offline.
#
#   1. files/alerts.yml of the chart equals deploy/alerts.yml byte for byte.
#   2. helm lint (default values, and with serviceMonitor/prometheusRule on).
#   3. helm template | kubeconform -strict -summary, both value sets. The
#      schemas: kubeconform's default downloads them from GitHub, which is
#      not reachable here, so deploy/helm/k8sschema writes them from the
#      OpenAPI document shipped in the k8s.io/kubernetes module
#      (api/openapi-spec/swagger.json) and from the Prometheus Operator's
#      CRDs in its module (ServiceMonitor, PrometheusRule), both fetched
#      through the Go module proxy. Every kind is validated; none is skipped.
#   4. kubeconform rejects a Deployment with a misspelt field (the schemas
#      really are strict) and a Service with a wrongly typed port.
#   5. The kineticd.toml (ConfigMap) and users.toml (Secret) the chart
#      renders pass kineticd --check-config together,
#      and the PrometheusRule's spec is deploy/alerts.yml unchanged.
#
# helm and kubeconform run as Go tools (go run module@version).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SCRIPT_NAME=check-helm
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

export PATH=$PATH:/usr/local/go/bin
export CGO_ENABLED=${CGO_ENABLED:-1} GOFLAGS=${GOFLAGS:--buildvcs=false}
HELM_MOD=helm.sh/helm/v3/cmd/helm@v3.22.0
KUBECONFORM_MOD=github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
K8S_MOD=k8s.io/kubernetes@v1.37.2
K8S_VERSION=1.37.2
PO_MOD=github.com/prometheus-operator/prometheus-operator@v0.85.0
CHART=deploy/helm/kineticd

helm() { go run "$HELM_MOD" "$@"; }
kubeconform() { go run "$KUBECONFORM_MOD" "$@"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The chart's copy of the alert rules.
cmp deploy/alerts.yml "$CHART/files/alerts.yml" ||
	die "$CHART/files/alerts.yml differs from deploy/alerts.yml: cp deploy/alerts.yml $CHART/files/alerts.yml"
say "files/alerts.yml equals deploy/alerts.yml"

# 2. Lint.
on=(--set serviceMonitor.enabled=true --set prometheusRule.enabled=true)
helm lint --quiet --kube-version "$K8S_VERSION" "$CHART"
helm lint --quiet --kube-version "$K8S_VERSION" "${on[@]}" "$CHART"

# 3. Schemas, made once per module version and kept in the cache.
moddir() { go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }
schemas=${XDG_CACHE_HOME:-$HOME/.cache}/pg-kinetic/k8s-schemas/${K8S_MOD##*@}-${PO_MOD##*@}
if [ ! -s "$schemas/deployment-apps-v1.json" ]; then
	k8s=$(moddir "$K8S_MOD")
	po=$(moddir "$PO_MOD")
	[ -n "$k8s" ] && [ -n "$po" ] || die "go mod download of $K8S_MOD or $PO_MOD failed"
	crds=$po/example/prometheus-operator-crd
	rm -rf "$schemas.new"
	go run ./deploy/helm/k8sschema -out "$schemas.new" \
		-swagger "$k8s/api/openapi-spec/swagger.json" \
		-crd "$crds/monitoring.coreos.com_servicemonitors.yaml,$crds/monitoring.coreos.com_prometheusrules.yaml"
	rm -rf "$schemas"
	mv "$schemas.new" "$schemas"
fi
validate() {
	kubeconform -strict -summary -schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$@"
}

helm template kineticd "$CHART" --kube-version "$K8S_VERSION" >"$tmp/default.yaml"
helm template kineticd "$CHART" --kube-version "$K8S_VERSION" "${on[@]}" >"$tmp/all.yaml"
validate "$tmp/default.yaml"
validate "$tmp/all.yaml"
for kind in Deployment Service ConfigMap Secret PodDisruptionBudget ServiceMonitor PrometheusRule; do
	grep -q "^kind: $kind\$" "$tmp/all.yaml" || die "helm template rendered no $kind"
done

# 4. The schemas are strict and typed: these must be refused.
sed 's/^  replicas: /  replica: /' "$tmp/default.yaml" >"$tmp/typo.yaml"
grep -q '^  replica: ' "$tmp/typo.yaml" || die "no replicas: line to misspell"
if validate "$tmp/typo.yaml" >"$tmp/typo.out" 2>&1; then
	cat "$tmp/typo.out" >&2
	die "kubeconform accepted a Deployment with spec.replica"
fi
grep -q 'replica' "$tmp/typo.out" || { cat "$tmp/typo.out" >&2; die "kubeconform refused the misspelt Deployment for another reason"; }
sed 's/^      port: 6432$/      port: "six"/' "$tmp/default.yaml" >"$tmp/type.yaml"
grep -q 'port: "six"' "$tmp/type.yaml" || die "no Service port line to change"
if validate "$tmp/type.yaml" >"$tmp/type.out" 2>&1; then
	die "kubeconform accepted a Service port \"six\""
fi
say "kubeconform refuses spec.replica and port \"six\""

# 5. The rendered kineticd.toml is a valid kineticd config, and the rule
#    spec is deploy/alerts.yml re-indented by two spaces.
extract() { # extract KEY: the block scalar of a rendered data/stringData key
	awk -v key="$1" '$0 == "  " key ": |" { on = 1; next }
		on && /^    / { sub(/^    /, ""); print; next }
		on && /^ *$/ { print ""; next }
		on { exit }' "$tmp/default.yaml"
}
extract kineticd.toml >"$tmp/kineticd.toml"
extract users.toml >"$tmp/users.toml"
grep -q '^users_file = "/etc/kineticd-users/users.toml"$' "$tmp/kineticd.toml" || die "the ConfigMap's kineticd.toml does not name the users Secret's file"
! grep -q '^\[\[users\]\]' "$tmp/kineticd.toml" || die "users in the ConfigMap"
grep -q '^\[\[users\]\]' "$tmp/users.toml" || die "no users.toml with users in the rendered Secret"
# (The mount paths, checked against the Deployment, become the temp dir's.)
grep -q 'mountPath: /etc/kineticd-users$' "$tmp/default.yaml" || die "the users Secret is not mounted at /etc/kineticd-users"
sed -i "s|^users_file = .*|users_file = \"$tmp/users.toml\"|" "$tmp/kineticd.toml"
go build -o "$tmp/kineticd" ./cmd/kineticd
out=$("$tmp/kineticd" --check-config "$tmp/kineticd.toml" 2>&1) || { cat "$tmp/kineticd.toml" >&2; die "rendered kineticd.toml: $out"; }
[ "$out" = "config ok" ] || die "kineticd --check-config printed \"$out\""
say "rendered kineticd.toml (ConfigMap) with users.toml (Secret): $out"
awk '/^kind: PrometheusRule$/ { rule = 1 }
	rule && /^spec:$/ { on = 1; next }
	on && /^---$/ { exit }
	on { sub(/^  /, ""); print }' "$tmp/all.yaml" >"$tmp/rules.yml"
diff <(sed 's/[[:space:]]*$//' deploy/alerts.yml) <(sed 's/[[:space:]]*$//' "$tmp/rules.yml") >&2 ||
	die "the PrometheusRule's spec differs from deploy/alerts.yml"
say "PrometheusRule spec equals deploy/alerts.yml"
grep -q '^      terminationGracePeriodSeconds: 45$' "$tmp/default.yaml" ||
	die "terminationGracePeriodSeconds is not 10 + 30 + 5 = 45 with the default values"

# 6. Values the chart must refuse at render time, each with its own message.
refuse() {
	local want=$1
	shift
	if helm template kineticd "$CHART" --kube-version "$K8S_VERSION" "$@" >"$tmp/refused.out" 2>&1; then
		die "helm template accepted $*"
	fi
	grep -q -- "$want" "$tmp/refused.out" || { cat "$tmp/refused.out" >&2; die "helm template $*: no \"$want\" in the error"; }
}
refuse 'config.server.listen is set by the chart' --set config.server.listen=:5432
refuse 'terminationGracePeriodSeconds 20 is shorter' --set terminationGracePeriodSeconds=20
refuse 'needs at least one user' --set 'users=null'
# existingSecret: no Secret rendered, the pods mount the named one.
helm template kineticd "$CHART" --kube-version "$K8S_VERSION" --set existingSecret=my-kineticd >"$tmp/existing.yaml"
! grep -q '^kind: Secret$' "$tmp/existing.yaml" || die "existingSecret set, but a Secret was rendered"
grep -q 'secretName: my-kineticd$' "$tmp/existing.yaml" || die "existingSecret is not mounted"
validate "$tmp/existing.yaml"
say "bad values refused; existingSecret renders no Secret"
say "ok"
