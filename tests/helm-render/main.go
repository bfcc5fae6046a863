// helm-render renders a Helm chart the way `helm template` does, for ringmaster's tests: Go's
// text/template with the sprig functions Helm registers, and the few Helm built-ins the chart uses
// (include, tpl, toYaml, fromYaml, toJson, required, fail, lookup; .Values, .Release, .Chart,
// .Capabilities, .Template). It is a test tool, not a Helm clone: no dependencies, hooks or
// packaging. Values are coalesced like Helm's (chart values.yaml, then each -f file in order, maps
// merged deeply, null deletes a key) and checked against the chart's values.schema.json (JSON Schema,
// as Helm does) before anything renders; a violation names the value and the exit status is 1.
//
// Build (Debian packages golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
// golang-github-xeipuuv-gojsonschema-dev, GOPATH mode):
//   GOPATH=/usr/share/gocode GO111MODULE=off go build -o build/helm-render ./tests/helm-render
// Use:
//   helm-render [--include-crds] [--name RELEASE] [--namespace NS] [-f values.yaml]... CHART_DIR
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// apiVersions is .Capabilities.APIVersions: `{{ if .Capabilities.APIVersions.Has "x/v1" }}`.
type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func die(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "helm-render: "+format+"\n", args...)
	os.Exit(1)
}

func readYAML(path string) (map[string]interface{}, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m, nil
}

// coalesce merges src over dst like Helm: maps recursively, anything else replaced, null deletes.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = coalesce(dm, sm)
		} else {
			dst[k] = v
		}
	}
	return dst
}

// validate checks the values against values.schema.json and names every violating value.
func validate(chartDir, chartName string, values map[string]interface{}) error {
	schemaPath := filepath.Join(chartDir, "values.schema.json")
	sb, err := os.ReadFile(schemaPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	vb, err := json.Marshal(values)
	if err != nil {
		return err
	}
	res, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(sb), gojsonschema.NewBytesLoader(vb))
	if err != nil {
		return fmt.Errorf("%s: %v", schemaPath, err)
	}
	if res.Valid() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n", chartName)
	for _, e := range res.Errors() {
		fmt.Fprintf(&b, "- %s\n", e.String()) // "replicaCount: Invalid type. Expected: integer, given: string"
	}
	return errors.New(strings.TrimSuffix(b.String(), "\n"))
}

func toYAML(v interface{}) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func chartObject(meta map[string]interface{}) map[string]interface{} {
	c := map[string]interface{}{}
	for k, v := range meta { // .Chart.Name, .Chart.AppVersion ... (Helm's Metadata field names)
		c[strings.ToUpper(k[:1])+k[1:]] = v
	}
	return c
}

func main() {
	var files multiFlag
	name := flag.String("name", "ringmaster", "release name")
	ns := flag.String("namespace", "ringmaster-system", "release namespace")
	crds := flag.Bool("include-crds", false, "emit the chart's crds/ first, as `helm install` applies them")
	kubeMinor := flag.String("kube-minor", "32", "the Kubernetes minor version .Capabilities reports")
	flag.Var(&files, "f", "values file (repeatable; later files win)")
	flag.Parse()
	if flag.NArg() != 1 {
		die("usage: helm-render [--include-crds] [--name R] [--namespace NS] [-f values.yaml]... CHART_DIR")
	}
	dir := flag.Arg(0)
	meta, err := readYAML(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		die("%v", err)
	}
	chartName, _ := meta["name"].(string)
	values, err := readYAML(filepath.Join(dir, "values.yaml"))
	if err != nil {
		die("%v", err)
	}
	for _, f := range files {
		m, err := readYAML(f)
		if err != nil {
			die("%v", err)
		}
		values = coalesce(values, m)
	}
	if err := validate(dir, chartName, values); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}

	tpl := template.New("gotpl").Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // Helm removes these two
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["include"] = func(n string, data interface{}) (string, error) {
		if includeDepth++; includeDepth > 1000 {
			return "", fmt.Errorf("include %q: recursion too deep", n)
		}
		defer func() { includeDepth-- }()
		var buf bytes.Buffer
		err := tpl.ExecuteTemplate(&buf, n, data)
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := tpl.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	funcs["toYaml"] = toYAML
	funcs["toJson"] = func(v interface{}) string { b, _ := json.Marshal(v); return string(b) }
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["lookup"] = func(string, string, string, string) map[string]interface{} { return map[string]interface{}{} }
	tpl.Funcs(funcs)

	tdir := filepath.Join(dir, "templates")
	entries, err := os.ReadDir(tdir)
	if err != nil {
		die("%v", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(tdir, e.Name()))
		if err != nil {
			die("%v", err)
		}
		tn := chartName + "/templates/" + e.Name()
		if _, err := tpl.New(tn).Parse(string(b)); err != nil {
			die("parse error: %v", err)
		}
		names = append(names, tn)
	}
	sort.Strings(names)
	top := map[string]interface{}{
		"Values":  values,
		"Release": map[string]interface{}{"Name": *name, "Namespace": *ns, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Chart":   chartObject(meta),
		"Capabilities": map[string]interface{}{
			"KubeVersion": map[string]interface{}{"Version": "v1." + *kubeMinor + ".0", "Major": "1", "Minor": *kubeMinor, "GitVersion": "v1." + *kubeMinor + ".0"},
			"APIVersions": apiVersions{"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "coordination.k8s.io/v1",
				"apiextensions.k8s.io/v1", "ringmaster.dev/v1alpha1"},
			"HelmVersion": map[string]interface{}{"Version": "v3.16.0"},
		},
		"Files": map[string]interface{}{},
	}
	var out strings.Builder
	if *crds {
		cdir := filepath.Join(dir, "crds")
		ce, _ := os.ReadDir(cdir)
		for _, e := range ce {
			b, err := os.ReadFile(filepath.Join(cdir, e.Name()))
			if err != nil {
				die("%v", err)
			}
			fmt.Fprintf(&out, "---\n# Source: %s/crds/%s\n%s\n", chartName, e.Name(), strings.TrimSpace(string(b)))
		}
	}
	for _, tn := range names {
		base := filepath.Base(tn)
		if strings.HasPrefix(base, "_") || strings.EqualFold(base, "NOTES.txt") {
			continue // partials and notes are not manifests
		}
		top["Template"] = map[string]interface{}{"Name": tn, "BasePath": chartName + "/templates"}
		var buf bytes.Buffer
		if err := tpl.ExecuteTemplate(&buf, tn, top); err != nil {
			fmt.Fprintf(os.Stderr, "Error: %v\n", err)
			os.Exit(1)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		for _, doc := range strings.Split(text, "\n---") {
			doc = strings.TrimPrefix(doc, "---")
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var probe interface{}
			if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
				fmt.Fprintf(os.Stderr, "Error: YAML parse error on %s: %v\n", tn, err)
				os.Exit(1)
			}
			if probe == nil {
				continue // only comments
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tn, strings.Trim(doc, "\n"))
		}
	}
	fmt.Print(out.String())
}
