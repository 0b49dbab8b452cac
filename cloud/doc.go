// Package cloud stands between the controllers and a cloud provider (any
// k8s.io/cloud-provider Interface).
//
// A Guard wraps the provider: every call gets a deadline, a caller waits at
// most DetachAfter and is then released with ErrInProgress while the call
// goes on (its result is kept for the object's next call), a call past its
// deadline that never returns is abandoned and counted, calls that mutate
// the same object never overlap (ErrFenced), and the calls in flight and
// their rate are bounded (ErrSaturated). Controllers, and a binary's own
// controllers, reach the cloud only through the Guard's Interface methods,
// and requeue with RetryAfter(err) when a call asks them to wait.
//
// RegisterProvider registers a provider under a name for --cloud-provider,
// as cloudprovider.RegisterCloudProvider does, and lists it in errors.
package cloud
