// Package bench runs node-initialisation scenarios side by side on ccmkit's
// cloud-node controller and on the upstream k8s.io/cloud-provider one, on
// one real kube-apiserver with a fresh fake cloud per run, and prints a
// table. Its tests carry the bench build tag so that `make test` never
// depends on timing: `make bench` runs them (go test -tags bench).
package bench
