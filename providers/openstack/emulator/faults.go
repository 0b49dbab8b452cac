package emulator

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Fault changes how a service answers the requests it matches. The parts
// apply in order: first the latency, then the hang, then the status.
type Fault struct {
	// Service is the service whose requests the fault matches; required.
	Service Service
	// Method, when set, limits the fault to requests with this method.
	Method string
	// Path, when set, limits the fault to requests whose path below the
	// service's root starts with it, like "v2.1/servers" or "v3/auth".
	Path string
	// Latency delays the answer.
	Latency time.Duration
	// Hang accepts the request and answers nothing until the fault is
	// removed (the request then goes on as if the fault were not there) or
	// the emulator closes (the connection is then dropped unanswered).
	Hang bool
	// Status, when set, answers with this status (a 5xx, a 409, a 429 ...)
	// in the service's error format instead of serving the request.
	Status int
	// Message is the error message of Status; default the status text.
	Message string
	// Count, when positive, applies the fault to only that many requests;
	// zero applies it until it is removed.
	Count int
}

// FaultID names an added fault.
type FaultID int

type fault struct {
	Fault
	id        FaultID
	remaining int // -1: unlimited
	released  chan struct{}
}

func (f *fault) matches(c *call) bool {
	return f.remaining != 0 && f.Service == c.service &&
		(f.Method == "" || strings.EqualFold(f.Method, c.r.Method)) &&
		strings.HasPrefix(c.path, f.Path)
}

// AddFault adds a fault and returns its ID for RemoveFault.
func (e *Emulator) AddFault(f Fault) FaultID {
	if f.Service == "" {
		panic("emulator: a fault needs a service")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faultSeq++
	remaining := f.Count
	if remaining <= 0 {
		remaining = -1
	}
	e.faults = append(e.faults, &fault{Fault: f, id: FaultID(e.faultSeq), remaining: remaining, released: make(chan struct{})})
	return FaultID(e.faultSeq)
}

// RemoveFault removes a fault; the requests it holds hung go on.
func (e *Emulator) RemoveFault(id FaultID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, f := range e.faults {
		if f.id == id {
			close(f.released)
			e.faults = append(e.faults[:i], e.faults[i+1:]...)
			return
		}
	}
}

// ClearFaults removes every fault.
func (e *Emulator) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.faults {
		close(f.released)
	}
	e.faults = nil
}

// Hung is the number of requests a fault holds hung now.
func (e *Emulator) Hung() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hung
}

// applyFaults runs the faults that match c. It returns false when the
// request was answered by a fault or must not be answered at all.
func (e *Emulator) applyFaults(c *call) bool {
	e.mu.Lock()
	var matched []*fault
	for _, f := range e.faults {
		if f.matches(c) {
			if f.remaining > 0 {
				f.remaining--
			}
			matched = append(matched, f)
		}
	}
	e.mu.Unlock()
	for _, f := range matched {
		if f.Latency > 0 && !c.wait(f.Latency, nil) {
			return false
		}
		if f.Hang && !e.hang(c, f) {
			return false
		}
		if f.Status != 0 {
			msg := f.Message
			if msg == "" {
				msg = fmt.Sprintf("%d %s", f.Status, http.StatusText(f.Status))
			}
			c.fail(f.Status, msg)
			return false
		}
	}
	return true
}

func (e *Emulator) hang(c *call, f *fault) bool {
	e.mu.Lock()
	e.hung++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.hung--
		e.mu.Unlock()
	}()
	return c.wait(0, f.released)
}
