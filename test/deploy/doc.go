// Package deploy tests the manifests in deploy/: every overlay renders with
// kustomize, grants no RBAC wildcard, passes a real kube-apiserver's
// server-side validation, and the cloud-controller-manager binary does its
// work with exactly the RBAC that the manifests grant.
package deploy
