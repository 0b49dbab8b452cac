#!/usr/bin/env bash
# Builds the binaries of the test control plane into .cache/testbin from
# source, through the Go module proxy, with the ordinary go command:
#
#   kube-apiserver  k8s.io/kubernetes, pinned in hack/testbin/kube-apiserver/go.mod
#   etcd            go.etcd.io/etcd/server/v3, pinned in hack/testbin/etcd/go.mod
#   kwok            sigs.k8s.io/kwok, pinned in KWOK_VERSION below
#
# A binary is rebuilt only when its version stamp (<name>.version beside it)
# differs from the pinned version, so running this again is cheap.
# Usage: hack/testbin.sh   (from anywhere; `make testbin` calls it)
set -euo pipefail

KWOK_VERSION=v0.8.0

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBIN_DIR="${REPO_ROOT}/.cache/testbin"
HELPERS_DIR="${REPO_ROOT}/hack/testbin"

# The helper modules are built on their own: never through a go.work of the
# repository, and from a clean clone (go.sum is committed; -mod=mod only lets
# a newer go command add what it needs instead of failing).
export GOWORK=off
export GOFLAGS="-mod=mod -buildvcs=false"

mkdir -p "${TESTBIN_DIR}"

# module_version DIR MODULE prints the version of MODULE required by the helper
# module in DIR.
module_version() {
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

# up_to_date NAME VERSION succeeds when NAME was built at VERSION.
up_to_date() {
  [[ -x "${TESTBIN_DIR}/$1" && -f "${TESTBIN_DIR}/$1.version" &&
    "$(cat "${TESTBIN_DIR}/$1.version")" == "$2" ]]
}

# build NAME VERSION COMMAND... runs COMMAND, which writes ${TESTBIN_DIR}/NAME,
# unless NAME is already present at VERSION, then stamps it with VERSION.
build() {
  local name=$1 version=$2
  shift 2
  if up_to_date "${name}" "${version}"; then
    echo "${name} ${version}: already present in ${TESTBIN_DIR}"
    return
  fi
  rm -f "${TESTBIN_DIR}/${name}.version"
  local start=${SECONDS}
  "$@"
  echo "${version}" >"${TESTBIN_DIR}/${name}.version"
  echo "${name} ${version}: built in $((SECONDS - start))s into ${TESTBIN_DIR}"
}

build_kube_apiserver() {
  local version=$1 minor
  minor="$(cut -d. -f2 <<<"${version}")"
  local ldflags="-s -w"
  # The same version variables that kubernetes' own build sets, so that
  # --version and /version report the real release.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    ldflags+=" -X ${pkg}.gitTreeState=clean"
  done
  (cd "${HELPERS_DIR}/kube-apiserver" &&
    go build -ldflags "${ldflags}" -o "${TESTBIN_DIR}/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv -f "${TESTBIN_DIR}/kube-apiserver.tmp" "${TESTBIN_DIR}/kube-apiserver"
}

build_etcd() {
  (cd "${HELPERS_DIR}/etcd" && go build -ldflags "-s -w" -o "${TESTBIN_DIR}/etcd.tmp" .)
  mv -f "${TESTBIN_DIR}/etcd.tmp" "${TESTBIN_DIR}/etcd"
}

build_kwok() {
  # go install pkg@version ignores any go.mod, so GOFLAGS must not carry -mod.
  (cd "${TESTBIN_DIR}" && GOFLAGS=-buildvcs=false GOBIN="${TESTBIN_DIR}" go install "sigs.k8s.io/kwok/cmd/kwok@$1")
}

kube_version="$(module_version "${HELPERS_DIR}/kube-apiserver" k8s.io/kubernetes)"
build kube-apiserver "${kube_version}" build_kube_apiserver "${kube_version}"

etcd_version="$(module_version "${HELPERS_DIR}/etcd" go.etcd.io/etcd/server/v3)"
build etcd "${etcd_version}" build_etcd

build kwok "${KWOK_VERSION}" build_kwok "${KWOK_VERSION}"
