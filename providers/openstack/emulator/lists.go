package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// decode reads the request's JSON body into v. Unknown attributes are
// refused, as Neutron and Octavia refuse them, so that a client that sends
// what the emulator does not model fails loudly instead of being half
// served. On failure it answers 400 and returns false.
func (c *call) decode(v any) bool {
	dec := json.NewDecoder(c.r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		c.fail(http.StatusBadRequest, "Invalid request body: "+err.Error())
		return false
	}
	return true
}

// listParams are query parameters that page or sort a list rather than
// filter it.
var listParams = []string{"fields", "limit", "marker", "sort_key", "sort_dir", "page_reverse"}

// filter is a query parameter with a meaning of its own: it reports
// whether a view matches the parameter's values.
type filter func(view map[string]any, values []string) bool

// matchView reports whether a view matches every filter of a query. A
// parameter with a filter of its own in special uses it; any other must
// name an attribute of the view, which matches when its value equals one
// of the parameter's values. A parameter that names no attribute is an
// error, as it is for a Neutron with filter validation: a client that
// misspells a filter must not get everything back.
func matchView(view map[string]any, q url.Values, special map[string]filter) (bool, error) {
	for key, values := range q {
		if slices.Contains(listParams, key) {
			continue
		}
		if f := special[key]; f != nil {
			if !f(view, values) {
				return false, nil
			}
			continue
		}
		if _, ok := tagFilters[key]; ok {
			if !matchTags(view, key, values) {
				return false, nil
			}
			continue
		}
		attr, ok := view[key]
		if !ok {
			return false, fmt.Errorf("%s is not a valid filter", key)
		}
		if !slices.ContainsFunc(values, func(v string) bool { return attrEquals(attr, v) }) {
			return false, nil
		}
	}
	return true, nil
}

func attrEquals(attr any, v string) bool {
	switch a := attr.(type) {
	case nil:
		return v == "" || v == "null"
	case string:
		return a == v
	case bool:
		return strings.EqualFold(v, fmt.Sprint(a))
	default:
		return fmt.Sprint(a) == v
	}
}

// tagFilters are the tag filters of Neutron and Octavia: tags (all of),
// tags-any, not-tags (not all of) and not-tags-any (none of). Each takes a
// comma-separated list, and may repeat.
var tagFilters = map[string]struct{ any, not bool }{
	"tags":         {},
	"tags-any":     {any: true},
	"not-tags":     {not: true},
	"not-tags-any": {any: true, not: true},
}

func matchTags(view map[string]any, key string, values []string) bool {
	have, _ := view["tags"].([]string)
	var want []string
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t != "" {
				want = append(want, t)
			}
		}
	}
	mode := tagFilters[key]
	hit := func(t string) bool { return slices.Contains(have, t) }
	var match bool
	if mode.any {
		match = slices.ContainsFunc(want, hit)
	} else {
		match = !slices.ContainsFunc(want, func(t string) bool { return !hit(t) })
	}
	if mode.not {
		return !match
	}
	return match
}

// filterViews keeps the views that match the query; false when the query
// was refused (the call is answered).
func (c *call) filterViews(views []map[string]any, special map[string]filter) ([]any, bool) {
	out := make([]any, 0, len(views))
	q := c.r.URL.Query()
	for _, v := range views {
		ok, err := matchView(v, q, special)
		if err != nil {
			c.fail(http.StatusBadRequest, err.Error())
			return nil, false
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, true
}

// ifMatch checks an If-Match: revision_number=N precondition, as Neutron
// does; false when it failed (the call is answered with 412).
func (c *call) ifMatch(revision int) bool {
	h := c.r.Header.Get("If-Match")
	if h == "" {
		return true
	}
	for _, part := range strings.Split(h, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "revision_number="); ok && v == fmt.Sprint(revision) {
			return true
		}
	}
	c.fail(http.StatusPreconditionFailed, "Constrained to revision_number "+h+", but the resource is at revision "+fmt.Sprint(revision)+".")
	return false
}

func cloneTags(tags []string) []string {
	if tags == nil {
		return []string{}
	}
	return slices.Clone(tags)
}

// isJSONNull reports whether a raw attribute is an explicit null.
func isJSONNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// neutronTime is a timestamp as Neutron writes it.
func neutronTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
