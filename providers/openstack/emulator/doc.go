// Package emulator is an OpenStack cloud on one real HTTP server, for the
// tests of the openstack provider. It follows the OpenStack API reference
// for what the provider uses: Keystone v3 tokens (password, application
// credential and token methods, project scope, a catalog whose endpoints
// point back at the emulator), Nova servers and flavors with
// microversions, Neutron (extensions, networks, subnets, ports with
// allowed address pairs, floating IPs, routers whose static routes change
// by a PUT with an If-Match revision or, with the extraroute-atomic
// extension, by add_extraroutes and remove_extraroutes) and Octavia v2
// (load balancers, fully populated or not, listeners, pools, members with
// the batch update, health monitors, tags, cascade delete). Tests change the cloud and
// inject faults through its Go API while the provider talks HTTP to it
// through gophercloud.
//
// Octavia works as Octavia does: a change answers at once and leaves the
// load balancer PENDING_CREATE, PENDING_UPDATE or PENDING_DELETE for
// Options.OctaviaDelay (SetOctaviaDelay), after which it is ACTIVE (ERROR
// after FailProvisioning) or gone; any change to a load balancer or its
// children while it is not ACTIVE is refused with 409. A load balancer's
// VIP port is a Neutron port owned by "Octavia", made when the load
// balancer is and deleted with it, which disassociates its floating IP.
// A server's fixed addresses on networks Neutron knows have ports of the
// server.
//
//	e := emulator.New(emulator.Options{})
//	defer e.Close()
//	user, _ := e.AddUser(emulator.User{Name: "ccm", Password: "pw", Projects: []string{e.DefaultProject().ID}})
//	net, _ := e.AddNetwork(emulator.Net{Name: "private"})
//	sub, _ := e.AddSubnet(emulator.Subnet{NetworkID: net.ID, CIDR: "10.0.0.0/24"})
//	srv, _ := e.AddServer(emulator.Server{Name: "node-1", Flavor: "m1.small",
//		Addresses: map[string][]emulator.Address{"private": {{Addr: "10.0.0.5"}}}}) // and its port
//	e.AddFault(emulator.Fault{Service: emulator.Compute, Hang: true})
//	lbs := e.LoadBalancers() // with listeners, pools, members, monitors
//
// Layout of the server: Keystone is at /identity (the auth URL is
// AuthURL(), /identity/v3); every other service is published in the
// catalog on the public, internal and admin interfaces, each under its own
// path (/public/compute/v2.1, /internal/network, /admin/load-balancer, ...),
// so a test can see from Requests which interface the client chose.
//
// Each service lives in its own file: keystone.go, nova.go, neutron.go
// (and routers.go for Neutron's routers) and octavia.go, with its state
// (a field of Emulator, guarded by its mutex), its control methods and
// its handlers, registered in New. emulator.go
// has the server, the routing (route: request log, then faults, then the
// token check), the error bodies in each service's format and the request
// log; faults.go has the fault injection; lists.go the request decoding
// and the list filters Neutron and Octavia share.
//
// This package is for tests only; no non-test code imports it.
package emulator
