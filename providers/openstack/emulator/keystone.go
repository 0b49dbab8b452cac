package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Domain is a Keystone domain. The emulator starts with the domain
// "default", named "Default".
type Domain struct {
	ID   string
	Name string
}

// Project is a Keystone project.
type Project struct {
	ID       string
	Name     string
	DomainID string
}

// User is a Keystone user.
type User struct {
	// ID is generated when empty.
	ID   string
	Name string
	// DomainID defaults to "default".
	DomainID string
	Password string
	// Projects are the IDs of the projects the user has a role on.
	Projects []string
	// DefaultProjectID, when set, scopes a token asked for without a scope.
	DefaultProjectID string
}

// ApplicationCredential is a Keystone application credential. A token made
// with it is scoped to its project; it cannot ask for another scope.
type ApplicationCredential struct {
	// ID is generated when empty.
	ID     string
	Name   string
	UserID string
	Secret string
	// ProjectID defaults to the user's first project.
	ProjectID string
}

type token struct {
	id        string
	userID    string
	projectID string // empty: unscoped
	appCredID string
	methods   []string
	issued    time.Time
	expires   time.Time
}

// keystoneVersion is the v3 minor version the emulator announces.
const keystoneVersion = "v3.14"

// Unauthorized is Keystone's message for every failed authentication: it
// does not tell a wrong password from an unknown user.
const unauthorized = "The request you have made requires authentication."

// keystoneState is what Keystone knows.
type keystoneState struct {
	domains        map[string]*Domain
	projects       map[string]*Project
	users          map[string]*User
	appCreds       map[string]*ApplicationCredential
	tokens         map[string]*token
	defaultProject string
	serviceIDs     map[Service]string
}

func newKeystoneState() keystoneState {
	k := keystoneState{
		domains:    map[string]*Domain{"default": {ID: "default", Name: "Default"}},
		projects:   map[string]*Project{},
		users:      map[string]*User{},
		appCreds:   map[string]*ApplicationCredential{},
		tokens:     map[string]*token{},
		serviceIDs: map[Service]string{},
	}
	p := &Project{ID: newID(), Name: "demo", DomainID: "default"}
	k.projects[p.ID] = p
	k.defaultProject = p.ID
	for _, s := range []Service{Identity, Compute, Network, LoadBalancer} {
		k.serviceIDs[s] = newID()
	}
	return k
}

// DefaultProject is the project the emulator starts with, "demo" in the
// default domain. Servers belong to it unless they name another.
func (e *Emulator) DefaultProject() Project {
	e.mu.Lock()
	defer e.mu.Unlock()
	return *e.keystone.projects[e.keystone.defaultProject]
}

// AddDomain adds a domain.
func (e *Emulator) AddDomain(d Domain) (Domain, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d.ID == "" {
		d.ID = newID()
	}
	for _, o := range e.keystone.domains {
		if o.ID == d.ID || o.Name == d.Name {
			return Domain{}, fmt.Errorf("domain %s (%s) exists", d.Name, d.ID)
		}
	}
	e.keystone.domains[d.ID] = &d
	return d, nil
}

// AddProject adds a project; DomainID defaults to "default".
func (e *Emulator) AddProject(p Project) (Project, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p.ID == "" {
		p.ID = newID()
	}
	if p.DomainID == "" {
		p.DomainID = "default"
	}
	if e.keystone.domains[p.DomainID] == nil {
		return Project{}, fmt.Errorf("project %s: no domain %s", p.Name, p.DomainID)
	}
	for _, o := range e.keystone.projects {
		if o.ID == p.ID || (o.Name == p.Name && o.DomainID == p.DomainID) {
			return Project{}, fmt.Errorf("project %s exists in domain %s", p.Name, p.DomainID)
		}
	}
	e.keystone.projects[p.ID] = &p
	return p, nil
}

// AddUser adds a user.
func (e *Emulator) AddUser(u User) (User, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if u.ID == "" {
		u.ID = newID()
	}
	if u.DomainID == "" {
		u.DomainID = "default"
	}
	if e.keystone.domains[u.DomainID] == nil {
		return User{}, fmt.Errorf("user %s: no domain %s", u.Name, u.DomainID)
	}
	for _, p := range append(slices.Clone(u.Projects), u.DefaultProjectID) {
		if p != "" && e.keystone.projects[p] == nil {
			return User{}, fmt.Errorf("user %s: no project %s", u.Name, p)
		}
	}
	for _, o := range e.keystone.users {
		if o.ID == u.ID || (o.Name == u.Name && o.DomainID == u.DomainID) {
			return User{}, fmt.Errorf("user %s exists in domain %s", u.Name, u.DomainID)
		}
	}
	u.Projects = slices.Clone(u.Projects)
	e.keystone.users[u.ID] = &u
	return u, nil
}

// SetPassword changes a user's password. Tokens already issued stay valid.
func (e *Emulator) SetPassword(userID, password string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.keystone.users[userID]
	if u == nil {
		return fmt.Errorf("no user %s", userID)
	}
	u.Password = password
	return nil
}

// AddApplicationCredential adds an application credential of a user.
func (e *Emulator) AddApplicationCredential(a ApplicationCredential) (ApplicationCredential, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := e.keystone.users[a.UserID]
	if u == nil {
		return ApplicationCredential{}, fmt.Errorf("application credential %s: no user %s", a.Name, a.UserID)
	}
	if a.ID == "" {
		a.ID = newID()
	}
	if a.ProjectID == "" && len(u.Projects) > 0 {
		a.ProjectID = u.Projects[0]
	}
	if !slices.Contains(u.Projects, a.ProjectID) {
		return ApplicationCredential{}, fmt.Errorf("application credential %s: user %s has no role on project %q", a.Name, u.Name, a.ProjectID)
	}
	if a.Secret == "" {
		return ApplicationCredential{}, fmt.Errorf("application credential %s: no secret", a.Name)
	}
	for _, o := range e.keystone.appCreds {
		if o.ID == a.ID || (o.UserID == a.UserID && o.Name == a.Name) {
			return ApplicationCredential{}, fmt.Errorf("application credential %s exists", a.Name)
		}
	}
	e.keystone.appCreds[a.ID] = &a
	return a, nil
}

// ExpireTokens makes every token issued so far expire now, as if the clock
// had passed their expiry: services answer them 401 and Keystone refuses
// them in the token method.
func (e *Emulator) ExpireTokens() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.opts.Now()
	for _, t := range e.keystone.tokens {
		t.expires = now
	}
}

// checkToken returns the token of a service request, if it is valid: known,
// not expired and scoped to a project.
func (e *Emulator) checkToken(id string) (*token, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.keystone.tokens[id]
	if t == nil || !e.opts.Now().Before(t.expires) || t.projectID == "" {
		return nil, false
	}
	cp := *t
	return &cp, true
}

func (e *Emulator) routeKeystone(mux *http.ServeMux) {
	e.routeNotFound(mux, Identity, "")
	e.route(mux, http.MethodGet, "{$}", Identity, "", false, func(c *call) {
		c.json(http.StatusMultipleChoices, map[string]any{"versions": map[string]any{"values": []any{e.keystoneVersion()}}})
	})
	for _, p := range []string{"v3", "v3/{$}"} {
		e.route(mux, http.MethodGet, p, Identity, "", false, func(c *call) {
			c.json(http.StatusOK, map[string]any{"version": e.keystoneVersion()})
		})
	}
	e.route(mux, http.MethodPost, "v3/auth/tokens", Identity, "", false, e.createToken)
	e.route(mux, http.MethodGet, "v3/auth/tokens", Identity, "", false, e.validateToken)
}

func (e *Emulator) keystoneVersion() map[string]any {
	return map[string]any{
		"id":          keystoneVersion,
		"status":      "stable",
		"updated":     "2020-04-07T00:00:00Z",
		"links":       []any{map[string]any{"rel": "self", "href": e.AuthURL() + "/"}},
		"media-types": []any{map[string]any{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}},
	}
}

// The body of POST /v3/auth/tokens.
type authBody struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password *struct {
				User userRef `json:"user"`
			} `json:"password"`
			Token *struct {
				ID string `json:"id"`
			} `json:"token"`
			ApplicationCredential *struct {
				ID     string   `json:"id"`
				Name   string   `json:"name"`
				Secret string   `json:"secret"`
				User   *userRef `json:"user"`
			} `json:"application_credential"`
		} `json:"identity"`
		Scope json.RawMessage `json:"scope"`
	} `json:"auth"`
}

type userRef struct {
	ID       string     `json:"id"`
	Name     string     `json:"name"`
	Password string     `json:"password"`
	Domain   *domainRef `json:"domain"`
}

type domainRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type scopeBody struct {
	Project *struct {
		ID     string     `json:"id"`
		Name   string     `json:"name"`
		Domain *domainRef `json:"domain"`
	} `json:"project"`
	Domain *domainRef      `json:"domain"`
	System json.RawMessage `json:"system"`
	Trust  json.RawMessage `json:"OS-TRUST:trust"`
}

// authError is a refused authentication: its status and message.
type authError struct {
	status  int
	message string
}

func badRequest(format string, args ...any) *authError {
	return &authError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func notAuthorized(format string, args ...any) *authError {
	if format == "" {
		return &authError{http.StatusUnauthorized, unauthorized}
	}
	return &authError{http.StatusUnauthorized, fmt.Sprintf(format, args...)}
}

func (e *Emulator) createToken(c *call) {
	var body authBody
	if err := json.NewDecoder(c.r.Body).Decode(&body); err != nil {
		c.fail(http.StatusBadRequest, "Expecting to find auth in request body: "+err.Error())
		return
	}
	e.mu.Lock()
	t, aerr := e.issueToken(&body)
	var view map[string]any
	if aerr == nil {
		view = e.tokenView(t)
	}
	e.mu.Unlock()
	if aerr != nil {
		c.fail(aerr.status, aerr.message)
		return
	}
	c.w.Header().Set("X-Subject-Token", t.id)
	c.json(http.StatusCreated, view)
}

// issueToken authenticates body and makes its token. e.mu is held.
func (e *Emulator) issueToken(body *authBody) (*token, *authError) {
	id := body.Auth.Identity
	if len(id.Methods) != 1 {
		return nil, badRequest("the emulator expects exactly one authentication method, got %q", id.Methods)
	}
	now := e.opts.Now()
	t := &token{id: "gAAAAA" + newID() + newID(), methods: id.Methods, issued: now, expires: now.Add(e.opts.TokenTTL)}
	scoped := true
	switch id.Methods[0] {
	case "password":
		if id.Password == nil {
			return nil, badRequest("Expecting to find password in identity.")
		}
		u, aerr := e.findUser(id.Password.User)
		if aerr != nil {
			return nil, aerr
		}
		if u.Password != id.Password.User.Password {
			return nil, notAuthorized("")
		}
		t.userID = u.ID
	case "application_credential":
		ac := id.ApplicationCredential
		if ac == nil {
			return nil, badRequest("Expecting to find application_credential in identity.")
		}
		cred, aerr := e.findAppCred(ac.ID, ac.Name, ac.User)
		if aerr != nil {
			return nil, aerr
		}
		if cred.Secret != ac.Secret {
			return nil, notAuthorized("")
		}
		if len(body.Auth.Scope) > 0 && string(body.Auth.Scope) != "null" {
			return nil, notAuthorized("Application credentials cannot request a scope.")
		}
		t.userID, t.projectID, t.appCredID = cred.UserID, cred.ProjectID, cred.ID
		scoped = false
	case "token":
		if id.Token == nil {
			return nil, badRequest("Expecting to find token in identity.")
		}
		old := e.keystone.tokens[id.Token.ID]
		if old == nil || !now.Before(old.expires) {
			return nil, notAuthorized("")
		}
		// A token made from a token keeps the first one's expiry.
		t.userID, t.expires = old.userID, old.expires
		t.methods = append([]string{"token"}, old.methods...)
	default:
		return nil, notAuthorized("Attempted to authenticate with an unsupported method.")
	}
	if scoped {
		project, aerr := e.scope(body.Auth.Scope, e.keystone.users[t.userID])
		if aerr != nil {
			return nil, aerr
		}
		t.projectID = project
	}
	e.keystone.tokens[t.id] = t
	return t, nil
}

func (e *Emulator) findDomain(ref *domainRef) *Domain {
	if ref == nil {
		return nil
	}
	if ref.ID != "" {
		return e.keystone.domains[ref.ID]
	}
	for _, d := range e.keystone.domains {
		if d.Name == ref.Name {
			return d
		}
	}
	return nil
}

func (e *Emulator) findUser(ref userRef) (*User, *authError) {
	if ref.ID != "" {
		if u := e.keystone.users[ref.ID]; u != nil {
			return u, nil
		}
		return nil, notAuthorized("")
	}
	if ref.Name == "" {
		return nil, badRequest("Expecting to find id or name in user.")
	}
	if ref.Domain == nil || (ref.Domain.ID == "" && ref.Domain.Name == "") {
		return nil, badRequest("Expecting to find domain in user.")
	}
	d := e.findDomain(ref.Domain)
	if d == nil {
		return nil, notAuthorized("")
	}
	for _, u := range e.keystone.users {
		if u.Name == ref.Name && u.DomainID == d.ID {
			return u, nil
		}
	}
	return nil, notAuthorized("")
}

func (e *Emulator) findAppCred(id, name string, user *userRef) (*ApplicationCredential, *authError) {
	if id != "" {
		if a := e.keystone.appCreds[id]; a != nil {
			return a, nil
		}
		return nil, notAuthorized("")
	}
	if name == "" || user == nil {
		return nil, badRequest("Expecting to find id, or name and user, in application_credential.")
	}
	u, aerr := e.findUser(*user)
	if aerr != nil {
		return nil, aerr
	}
	for _, a := range e.keystone.appCreds {
		if a.UserID == u.ID && a.Name == name {
			return a, nil
		}
	}
	return nil, notAuthorized("")
}

// scope resolves the project a token asks for. No scope is the user's
// default project, if it has one and a role on it, else an unscoped token.
func (e *Emulator) scope(raw json.RawMessage, u *User) (string, *authError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `"unscoped"` {
		if string(raw) != `"unscoped"` && u.DefaultProjectID != "" && slices.Contains(u.Projects, u.DefaultProjectID) {
			return u.DefaultProjectID, nil
		}
		return "", nil
	}
	var s scopeBody
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", badRequest("Invalid scope: %v", err)
	}
	if s.Project == nil {
		return "", notAuthorized("the emulator supports project scope only")
	}
	var p *Project
	switch {
	case s.Project.ID != "":
		p = e.keystone.projects[s.Project.ID]
	case s.Project.Name != "":
		if s.Project.Domain == nil || (s.Project.Domain.ID == "" && s.Project.Domain.Name == "") {
			return "", badRequest("Expecting to find domain in project.")
		}
		if d := e.findDomain(s.Project.Domain); d != nil {
			for _, o := range e.keystone.projects {
				if o.Name == s.Project.Name && o.DomainID == d.ID {
					p = o
				}
			}
		}
	default:
		return "", badRequest("Expecting to find id or name in project.")
	}
	if p == nil {
		return "", notAuthorized("Could not find project.")
	}
	if !slices.Contains(u.Projects, p.ID) {
		return "", notAuthorized("User %s has no access to project %s", u.ID, p.ID)
	}
	return p.ID, nil
}

// tokenView is the body of a token. e.mu is held.
func (e *Emulator) tokenView(t *token) map[string]any {
	u := e.keystone.users[t.userID]
	view := map[string]any{
		"methods":    t.methods,
		"user":       map[string]any{"id": u.ID, "name": u.Name, "domain": e.domainView(u.DomainID), "password_expires_at": nil},
		"audit_ids":  []string{t.id[len(t.id)-22:]},
		"issued_at":  keystoneTime(t.issued),
		"expires_at": keystoneTime(t.expires),
	}
	if t.projectID != "" {
		p := e.keystone.projects[t.projectID]
		view["project"] = map[string]any{"id": p.ID, "name": p.Name, "domain": e.domainView(p.DomainID)}
		view["is_domain"] = false
		view["roles"] = []any{map[string]any{"id": "member-role", "name": "member"}, map[string]any{"id": "reader-role", "name": "reader"}}
		view["catalog"] = e.catalog()
	}
	if t.appCredID != "" {
		a := e.keystone.appCreds[t.appCredID]
		view["application_credential"] = map[string]any{"id": a.ID, "name": a.Name, "restricted": true}
	}
	return map[string]any{"token": view}
}

func (e *Emulator) domainView(id string) map[string]any {
	d := e.keystone.domains[id]
	return map[string]any{"id": d.ID, "name": d.Name}
}

func keystoneTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// catalog lists every service with an endpoint on each interface.
func (e *Emulator) catalog() []any {
	names := map[Service]string{Identity: "keystone", Compute: "nova", Network: "neutron", LoadBalancer: "octavia"}
	var out []any
	for _, s := range []Service{Identity, Compute, Network, LoadBalancer} {
		var endpoints []any
		for _, iface := range Interfaces {
			endpoints = append(endpoints, map[string]any{
				"id":        e.keystone.serviceIDs[s] + "-" + iface,
				"interface": iface,
				"region":    e.opts.Region,
				"region_id": e.opts.Region,
				"url":       e.endpoint(s, iface),
			})
		}
		out = append(out, map[string]any{"id": e.keystone.serviceIDs[s], "type": string(s), "name": names[s], "endpoints": endpoints})
	}
	return out
}

// validateToken is GET /v3/auth/tokens: the token in X-Subject-Token, for a
// caller with a valid token of its own.
func (e *Emulator) validateToken(c *call) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.opts.Now()
	caller := e.keystone.tokens[c.r.Header.Get("X-Auth-Token")]
	if caller == nil || !now.Before(caller.expires) {
		c.fail(http.StatusUnauthorized, unauthorized)
		return
	}
	subject := c.r.Header.Get("X-Subject-Token")
	t := e.keystone.tokens[subject]
	if t == nil || !now.Before(t.expires) {
		c.fail(http.StatusNotFound, "Could not find token: "+subject+".")
		return
	}
	c.w.Header().Set("X-Subject-Token", t.id)
	c.json(http.StatusOK, e.tokenView(t))
}
