// Command template-golden renders every case of the template crate's golden corpus with Go's
// own text/template and sprig, set up as ESO's template engine v2 sets them up, and writes what
// Go rendered (or that Go refused) to expected.json. The Rust test `template/tests/golden.rs`
// then demands byte-identical output from our engine.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/Masterminds/sprig/v3"
	"gopkg.in/yaml.v3"
)

// A case as cases.yaml holds it. Template is a pointer so that a missing `template:` is told
// apart from an empty template.
type goldenCase struct {
	Name     string                 `yaml:"name"`
	Template *string                `yaml:"template"`
	Data     map[string]interface{} `yaml:"data"`
	// Why our engine renders this case differently on purpose; read by the Rust test only.
	Differs string `yaml:"differs"`
}

// What Go did with one case. Exactly one of Output and Error is meaningful; Message is Go's
// error text, kept for a human reading a mismatch (our messages need not match it). Template
// and Data repeat the case as Go's YAML library read it, so that the Rust test can tell when
// its YAML library reads cases.yaml differently.
type result struct {
	Name     string            `json:"name"`
	Template string            `json:"template"`
	Data     map[string]string `json:"data,omitempty"`
	Output   *string           `json:"output,omitempty"`
	Error    bool              `json:"error,omitempty"`
	Message  string            `json:"message,omitempty"`
}

// Functions whose result depends on the clock or on randomness. A case calling one would make
// expected.json differ from run to run (or, worse, only from year to year), so the generator
// refuses it outright rather than relying on two runs differing.
var nondeterministic = []string{
	"now", "ago",
	"randAlphaNum", "randAlpha", "randAscii", "randNumeric", "randBytes", "randInt",
	"uuidv4", "shuffle",
	"genPrivateKey", "genCA", "genCAWithKey", "genSelfSignedCert", "genSelfSignedCertWithKey",
	"genSignedCert", "genSignedCertWithKey", "buildCustomCert",
	"bcrypt", "htpasswd", "encryptAES",
}

// Functions that read the clock only for some arguments: sprig's date formatters fall back to
// time.Now() for a date that is neither a time.Time nor an int, and durationRound measures the
// time since a time.Time.
var clockForSomeArguments = map[string]func(args []reflect.Value) bool{
	"date":           notTimeOrInt(1),
	"htmlDate":       notTimeOrInt(0),
	"dateInZone":     notTimeOrInt(1),
	"date_in_zone":   notTimeOrInt(1),
	"htmlDateInZone": notTimeOrInt(0),
	"durationRound": func(args []reflect.Value) bool {
		_, isTime := args[0].Interface().(time.Time)
		return isTime
	},
}

func notTimeOrInt(idx int) func([]reflect.Value) bool {
	return func(args []reflect.Value) bool {
		switch args[idx].Interface().(type) {
		case time.Time, *time.Time, int, int32, int64:
			return false
		}
		return true
	}
}

func main() {
	casesPath := flag.String("cases", "../../template/tests/golden/cases.yaml", "the corpus to render")
	outPath := flag.String("out", "../../template/tests/golden/expected.json", "where Go's results go")
	flag.Parse()
	if err := run(*casesPath, *outPath); err != nil {
		fmt.Fprintln(os.Stderr, "template-golden:", err)
		os.Exit(1)
	}
}

func run(casesPath, outPath string) error {
	// ESO's image sets no TZ and ships no zoneinfo, so the operator's local zone is UTC;
	// toDate and date use the local zone, and the corpus must not depend on this machine's.
	time.Local = time.UTC

	cases, err := readCases(casesPath)
	if err != nil {
		return err
	}
	results := make([]result, 0, len(cases))
	var problems []string
	for _, c := range cases {
		first, tainted := render(c)
		second, _ := render(c)
		switch {
		case tainted != "":
			problems = append(problems, fmt.Sprintf("%s: calls %s, which depends on the clock or randomness", c.Name, tainted))
		case !reflect.DeepEqual(first, second):
			problems = append(problems, fmt.Sprintf("%s: renders differently on a second run", c.Name))
		case first.Output != nil && !utf8.ValidString(*first.Output):
			// The Rust engine renders to a String; such a case could never be compared.
			problems = append(problems, fmt.Sprintf("%s: output is not valid UTF-8", c.Name))
		}
		results = append(results, first)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d unusable case(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}

	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(results); err != nil {
		return err
	}
	if err := os.WriteFile(outPath, out.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("template-golden: %d cases written to %s\n", len(results), outPath)
	return nil
}

func readCases(path string) ([]goldenCase, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cases []goldenCase
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, c := range cases {
		if c.Name == "" {
			return nil, fmt.Errorf("case #%d has no name", i+1)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("case %q appears twice", c.Name)
		}
		seen[c.Name] = true
		if c.Template == nil {
			return nil, fmt.Errorf("case %q has no template", c.Name)
		}
		// The Rust harness reads data as strings only; an unquoted YAML number or boolean would
		// be read differently by the two sides, so it is refused here.
		for k, v := range c.Data {
			if _, ok := v.(string); !ok {
				return nil, fmt.Errorf("case %q: data %q is not a YAML string (quote it)", c.Name, k)
			}
		}
	}
	return cases, nil
}

// render executes one case as ESO's engine v2 does; tainted names a clock- or
// randomness-dependent function the case called.
func render(c goldenCase) (result, string) {
	tainted := ""
	funcs := esoSprig(func(name string) { tainted = name })
	data := make(map[string]string, len(c.Data))
	for k, v := range c.Data {
		data[k] = v.(string)
	}

	r := result{Name: c.Name, Template: *c.Template, Data: data}
	t, err := template.New(c.Name).Option("missingkey=error").Funcs(funcs).Parse(*c.Template)
	if err == nil {
		var buf bytes.Buffer
		if err = t.Execute(&buf, data); err == nil {
			out := buf.String()
			r.Output = &out
			return r, tainted
		}
	}
	r.Error = true
	r.Message = err.Error()
	return r, tainted
}

// esoSprig is sprig's TxtFuncMap without the functions ESO removes, with every
// nondeterministic function wrapped so that calling it reports its name. The wrappers keep
// each function's exact type, so Go's argument checks and messages are unchanged.
func esoSprig(taint func(string)) template.FuncMap {
	funcs := sprig.TxtFuncMap()
	for _, name := range []string{"env", "expandenv", "getHostByName"} {
		delete(funcs, name)
	}
	for _, name := range nondeterministic {
		if f, ok := funcs[name]; ok {
			funcs[name] = watch(name, f, func([]reflect.Value) bool { return true }, taint)
		}
	}
	for name, suspicious := range clockForSomeArguments {
		funcs[name] = watch(name, funcs[name], suspicious, taint)
	}
	return funcs
}

func watch(name string, f interface{}, suspicious func([]reflect.Value) bool, taint func(string)) interface{} {
	fv := reflect.ValueOf(f)
	ft := fv.Type()
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		if suspicious(args) {
			taint(name)
		}
		if ft.IsVariadic() {
			return fv.CallSlice(args)
		}
		return fv.Call(args)
	}).Interface()
}
