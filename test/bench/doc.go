// Package bench runs the same scenarios side by side on ccmkit's
// controllers and on the upstream k8s.io/cloud-provider ones (cloud-node:
// N1-N2, route: R1-R3, service: S1-S3), on one real kube-apiserver with a
// fresh fake cloud per run, and prints a table per controller. Its tests
// carry the bench build tag so that `make test` never depends on timing:
// `make bench` runs them (go test -tags bench).
package bench
