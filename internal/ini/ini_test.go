package ini

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const file = `
; comment
# comment
[Global]
Region = us-east-1
  zone=us-east-1a   ; trailing comment
Quoted = "a;b # c" ; comment
Escapes = "x\"y\\z\tw"
Inner = a  "  b  "  c
Flag
Flag2 ; a bare key with a comment
Empty =

[ServiceOverride "ec2 one"] ; a comment after a header
URL = https://ec2.example/path#frag-is-comment
[serviceoverride "Q\"uoted"]
Service = sts
[Other]
`
	got, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Section: "global", Key: "region", Value: "us-east-1", Line: 5, SectionLine: 4},
		{Section: "global", Key: "zone", Value: "us-east-1a", Line: 6, SectionLine: 4},
		{Section: "global", Key: "quoted", Value: "a;b # c", Line: 7, SectionLine: 4},
		{Section: "global", Key: "escapes", Value: "x\"y\\z\tw", Line: 8, SectionLine: 4},
		{Section: "global", Key: "inner", Value: "a    b    c", Line: 9, SectionLine: 4},
		{Section: "global", Key: "flag", Blank: true, Line: 10, SectionLine: 4},
		{Section: "global", Key: "flag2", Blank: true, Line: 11, SectionLine: 4},
		{Section: "global", Key: "empty", Value: "", Line: 12, SectionLine: 4},
		{Section: "serviceoverride", Subsection: "ec2 one", Key: "url", Value: "https://ec2.example/path", Line: 15, SectionLine: 14},
		{Section: "serviceoverride", Subsection: `Q"uoted`, Key: "service", Value: "sts", Line: 17, SectionLine: 16},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseSyntaxErrorsListsEveryLine(t *testing.T) {
	const file = `orphan = 1
[Global]
good = 1
bad key = 2
= 3
unterminated = "abc
[Sec unquoted]
lost = under a bad header
[Next
[Fine]
escape = \q
ok = 2
`
	entries, err := Parse(strings.NewReader(file))
	var syn *SyntaxError
	if !errors.As(err, &syn) {
		t.Fatalf("Parse = %v, want a *SyntaxError", err)
	}
	wantLines := []string{"line 1:", "line 4:", "line 5:", "line 6:", "line 7:", "line 9:", "line 11:"}
	if len(syn.Problems) != len(wantLines) {
		t.Errorf("problems = %q, want one for each of %v", syn.Problems, wantLines)
	}
	for i, p := range syn.Problems {
		if i < len(wantLines) && !strings.HasPrefix(p, wantLines[i]) {
			t.Errorf("problem %d = %q, want it to start with %q", i, p, wantLines[i])
		}
	}
	keys := make([]string, 0, len(entries))
	for _, e := range entries {
		keys = append(keys, e.Section+"."+e.Key)
	}
	if want := []string{"global.good", "fine.ok"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("entries of the good lines = %v, want %v", keys, want)
	}
}

func TestParseBool(t *testing.T) {
	for _, tt := range []struct {
		entry   Entry
		want    bool
		wantErr bool
	}{
		{Entry{Value: "true"}, true, false},
		{Entry{Value: "Yes"}, true, false},
		{Entry{Value: "on"}, true, false},
		{Entry{Value: "1"}, true, false},
		{Entry{Blank: true}, true, false},
		{Entry{Value: "FALSE"}, false, false},
		{Entry{Value: "no"}, false, false},
		{Entry{Value: "off"}, false, false},
		{Entry{Value: "0"}, false, false},
		{Entry{Value: ""}, false, true},
		{Entry{Value: "maybe"}, false, true},
	} {
		got, err := ParseBool(tt.entry)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseBool(%+v) = %v, %v; want %v, error %v", tt.entry, got, err, tt.want, tt.wantErr)
		}
	}
}
