// Package ini reads the INI dialect of cloud-provider config files, the
// git-config style that the gcfg library reads and that upstream cloud
// controller managers use for --cloud-config:
//
//	; a comment
//	[Global]
//	Region = us-east-1
//	Flag                       ; a key without "=" is a blank value (true for a boolean)
//	[ServiceOverride "ec2"]    ; a section with a quoted subsection name
//	URL = "https://ec2.example" # quoted values keep ; and #
//
// Section and key names are case-insensitive and are returned in lower
// case; subsection names are case-sensitive. Values are trimmed, may be
// quoted (with \" \\ \n \t \b escapes) and may carry a trailing comment. A
// key may repeat; what a repeat means is the caller's choice.
package ini

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Entry is one "key = value" line.
type Entry struct {
	// Section is the section's name in lower case.
	Section string
	// Subsection is the quoted name after the section's, unquoted; "" when
	// the header has none.
	Subsection string
	// Key is the key in lower case.
	Key string
	// Value is the unquoted value without its comment.
	Value string
	// Blank is true for a key without "=".
	Blank bool
	// Line is the line number, from 1; SectionLine that of the section's
	// header.
	Line, SectionLine int
}

// SyntaxError lists every line that could not be read. Parse returns it
// with the entries of the lines that could, so that a caller can report
// the syntax and the content problems of a file in one error.
type SyntaxError struct {
	Problems []string
}

func (e *SyntaxError) Error() string { return strings.Join(e.Problems, "; ") }

// Parse reads every entry of r. A line it cannot read is a problem in the
// returned *SyntaxError; the entries of the other lines are returned all
// the same. Any other error is from reading r.
func Parse(r io.Reader) ([]Entry, error) {
	var (
		entries  []Entry
		problems []string
		// seenHeader is true once a header was read; inSection is false
		// under a bad header, so that its keys go to no section (the header
		// is the problem reported).
		seenHeader, inSection bool
		section, subsec       string
		sectionLine           int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == ';' || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			var err error
			section, subsec, err = parseHeader(line)
			seenHeader, inSection, sectionLine = true, err == nil, n
			if err != nil {
				problems = append(problems, fmt.Sprintf("line %d: %v", n, err))
			}
			continue
		}
		if !inSection {
			if !seenHeader {
				problems = append(problems, fmt.Sprintf("line %d: %q is outside any [section]", n, line))
			}
			continue
		}
		e, err := parseEntry(line)
		if err != nil {
			problems = append(problems, fmt.Sprintf("line %d: %v", n, err))
			continue
		}
		e.Section, e.Subsection, e.Line, e.SectionLine = section, subsec, n, sectionLine
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return entries, &SyntaxError{Problems: problems}
	}
	return entries, nil
}

// parseHeader reads `[name]` or `[name "subsection"]`, with an optional
// comment after the bracket.
func parseHeader(line string) (section, subsection string, err error) {
	body := line[1:]
	name := body
	if i := strings.IndexAny(body, " \t]"); i >= 0 {
		name = body[:i]
	}
	if name == "" || !validName(name) {
		return "", "", fmt.Errorf("bad section header %s: a name of letters, digits, '-' and '.' must follow '['", line)
	}
	rest := strings.TrimLeft(body[len(name):], " \t")
	section = strings.ToLower(name)
	if strings.HasPrefix(rest, `"`) {
		var closed bool
		var b strings.Builder
		i := 1
		for ; i < len(rest); i++ {
			c := rest[i]
			if c == '"' {
				closed = true
				i++
				break
			}
			if c == '\\' && i+1 < len(rest) {
				i++
				c = rest[i]
			}
			b.WriteByte(c)
		}
		if !closed {
			return "", "", fmt.Errorf("bad section header %s: unterminated subsection name", line)
		}
		subsection = b.String()
		rest = strings.TrimLeft(rest[i:], " \t")
	} else if rest != "" && rest[0] != ']' {
		return "", "", fmt.Errorf("bad section header %s: a subsection name must be quoted", line)
	}
	if !strings.HasPrefix(rest, "]") {
		return "", "", fmt.Errorf("bad section header %s: no closing ']'", line)
	}
	if after := strings.TrimSpace(rest[1:]); after != "" && after[0] != ';' && after[0] != '#' {
		return "", "", fmt.Errorf("bad section header %s: text after ']'", line)
	}
	return section, subsection, nil
}

// parseEntry reads `key = value` or a bare `key`.
func parseEntry(line string) (Entry, error) {
	key, raw, hasValue := strings.Cut(line, "=")
	key = strings.TrimSpace(key)
	if !hasValue {
		// A bare key may carry a comment.
		if i := strings.IndexAny(key, ";#"); i >= 0 {
			key = strings.TrimSpace(key[:i])
		}
	}
	if key == "" {
		return Entry{}, fmt.Errorf("no key before '='")
	}
	if !validName(key) || strings.Contains(key, ".") {
		return Entry{}, fmt.Errorf("bad key %q: a key is letters, digits and '-'", key)
	}
	e := Entry{Key: strings.ToLower(key), Blank: !hasValue}
	if hasValue {
		v, err := unquote(strings.TrimSpace(raw))
		if err != nil {
			return Entry{}, fmt.Errorf("%s: %w", key, err)
		}
		e.Value = v
	}
	return e, nil
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// unquote reads a value: quoted parts keep their text, escapes are
// replaced, and an unquoted ; or # starts a comment.
func unquote(raw string) (string, error) {
	var b strings.Builder
	quoted := false
	// trimTo is the length of b up to its last quoted or escaped byte, so
	// that trimming trailing space never eats quoted space.
	trimTo := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '"':
			quoted = !quoted
			trimTo = b.Len()
		case c == '\\':
			if i+1 == len(raw) {
				return "", fmt.Errorf("value ends with a backslash")
			}
			i++
			switch raw[i] {
			case '"', '\\':
				b.WriteByte(raw[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			default:
				return "", fmt.Errorf("unknown escape \\%c", raw[i])
			}
			trimTo = b.Len()
		case !quoted && (c == ';' || c == '#'):
			return trimRight(b.String(), trimTo), nil
		default:
			b.WriteByte(c)
			if quoted {
				trimTo = b.Len()
			}
		}
	}
	if quoted {
		return "", fmt.Errorf("unterminated quote")
	}
	return trimRight(b.String(), trimTo), nil
}

// trimRight trims trailing blanks of s past keep.
func trimRight(s string, keep int) string {
	return s[:keep] + strings.TrimRight(s[keep:], " \t")
}

// ParseBool reads a boolean as gcfg does: true, yes, on, 1 or false, no,
// off, 0, in any case. A blank entry (a bare key) is true.
func ParseBool(e Entry) (bool, error) {
	if e.Blank {
		return true, nil
	}
	switch strings.ToLower(e.Value) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (true or false)", e.Value)
}
