// Package emulator is an OpenStack cloud on one real HTTP server, for the
// tests of the openstack provider. It follows the OpenStack API reference
// for what the provider uses: Keystone v3 tokens (password, application
// credential and token methods, project scope, a catalog whose endpoints
// point back at the emulator), Nova servers and flavors with
// microversions, and Neutron's extension list. Tests change the cloud and
// inject faults through its Go API while the provider talks HTTP to it
// through gophercloud.
//
//	e := emulator.New(emulator.Options{})
//	defer e.Close()
//	user, _ := e.AddUser(emulator.User{Name: "ccm", Password: "pw", Projects: []string{e.DefaultProject().ID}})
//	srv, _ := e.AddServer(emulator.Server{Name: "node-1", Flavor: "m1.small"})
//	e.AddFault(emulator.Fault{Service: emulator.Compute, Hang: true})
//
// Layout of the server: Keystone is at /identity (the auth URL is
// AuthURL(), /identity/v3); every other service is published in the
// catalog on the public, internal and admin interfaces, each under its own
// path (/public/compute/v2.1, /internal/network, /admin/load-balancer, ...),
// so a test can see from Requests which interface the client chose.
//
// Each service lives in its own file: keystone.go, nova.go, neutron.go and
// octavia.go, with its state (a field of Emulator, guarded by its mutex),
// its control methods and its handlers, registered in New. emulator.go
// has the server, the routing (route: request log, then faults, then the
// token check), the error bodies in each service's format and the request
// log; faults.go has the fault injection.
//
// This package is for tests only; no non-test code imports it.
package emulator
