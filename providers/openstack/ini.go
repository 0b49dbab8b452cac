package openstack

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// iniEntry is one "key = value" line of an INI section.
type iniEntry struct {
	section, key, value string
	line                int
}

// parseINI reads the INI dialect of cloud.conf (git-config style, as the
// gcfg library reads it): [Section] headers, section names and keys
// case-insensitive, "key = value" lines, values optionally in double
// quotes with \" \\ \n \t escapes, ; and # comments on their own line or
// after an unquoted value, a key without "=" meaning true, and keys that
// may repeat. Subsections ([Section "name"]) are kept as `section "name"`.
func parseINI(r io.Reader) ([]iniEntry, error) {
	var entries []iniEntry
	section := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == ';' || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return nil, fmt.Errorf("line %d: section header without ']': %s", n, line)
			}
			name := strings.TrimSpace(line[1:end])
			if name == "" {
				return nil, fmt.Errorf("line %d: empty section name", n)
			}
			base, sub, hasSub := strings.Cut(name, " ")
			section = strings.ToLower(base)
			if hasSub {
				section += " " + strings.TrimSpace(sub)
			}
			continue
		}
		if section == "" {
			return nil, fmt.Errorf("line %d: %q is outside any [section]", n, line)
		}
		key, raw, hasValue := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if key == "" {
			return nil, fmt.Errorf("line %d: no key before '='", n)
		}
		value := "true"
		if hasValue {
			v, err := iniValue(strings.TrimSpace(raw))
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", n, key, err)
			}
			value = v
		}
		entries = append(entries, iniEntry{section: section, key: key, value: value, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return entries, nil
}

// iniValue unquotes a value and strips a trailing comment.
func iniValue(raw string) (string, error) {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '"':
			quoted = !quoted
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
			default:
				return "", fmt.Errorf("unknown escape \\%c", raw[i])
			}
		case !quoted && (c == ';' || c == '#'):
			return strings.TrimSpace(b.String()), nil
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", fmt.Errorf("unterminated quote")
	}
	return strings.TrimSpace(b.String()), nil
}

// parseBool reads a gcfg boolean: true/yes/on/1 or false/no/off/0.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0", "":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (true/false)", s)
}

// parseUint reads a non-negative integer.
func parseUint(s string) (uint, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a non-negative integer", s)
	}
	return uint(v), nil
}
