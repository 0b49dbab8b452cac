package fake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// serveAdmin starts the admin API on a loopback address.
func (c *Cloud) serveAdmin(addr string) error {
	if err := validateLoopback(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fake cloud admin API: %w", err)
	}
	c.adminAddr = ln.Addr().String()
	c.admin = &http.Server{Handler: c.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	klog.Background().Info("Fake cloud admin API listening", "url", "http://"+c.adminAddr)
	go func() {
		if err := c.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.Background().Error(err, "Fake cloud admin API stopped")
		}
	}()
	return nil
}

// AdminAddr returns the address the admin API listens on, "" if none.
func (c *Cloud) AdminAddr() string { return c.adminAddr }

// AdminHandler is the admin API; see the package documentation.
func (c *Cloud) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /instances", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, c.ListInstances()) })
	mux.HandleFunc("POST /instances", func(w http.ResponseWriter, r *http.Request) {
		var in Instance
		if !decode(w, r, &in) {
			return
		}
		if err := c.AddInstance(in); err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		reply(w, http.StatusCreated, in)
	})
	mux.HandleFunc("DELETE /instances/{name}", func(w http.ResponseWriter, r *http.Request) {
		if !c.DeleteInstance(r.PathValue("name")) {
			fail(w, http.StatusNotFound, fmt.Errorf("no instance %q", r.PathValue("name")))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for action, state := range map[string]string{"stop": StateStopped, "start": StateRunning} {
		mux.HandleFunc("POST /instances/{name}/"+action, func(w http.ResponseWriter, r *http.Request) {
			if err := c.SetInstanceState(r.PathValue("name"), state); err != nil {
				fail(w, http.StatusNotFound, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	mux.HandleFunc("GET /loadbalancers", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, c.ListLoadBalancers()) })
	mux.HandleFunc("GET /vips", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, c.AllocatedVIPs()) })
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, c.ListRouteTable()) })
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]any{"calls": c.Calls(), "overlaps": c.Overlaps()})
	})
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, c.Faults()) })
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		if !decode(w, r, &f) {
			return
		}
		id, err := c.AddFault(f)
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		reply(w, http.StatusCreated, map[string]string{"id": id})
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, _ *http.Request) {
		c.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !c.RemoveFault(r.PathValue("id")) {
			fail(w, http.StatusNotFound, fmt.Errorf("no fault %q", r.PathValue("id")))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("bad JSON: %w", err))
		return false
	}
	return true
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, err error) {
	reply(w, status, map[string]string{"error": err.Error()})
}
