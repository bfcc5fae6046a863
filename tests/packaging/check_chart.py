#!/usr/bin/python3
"""Static checks for deploy/ and charts/ringmaster (no Helm binary can be installed here).

Usage: check_chart.py REPO_ROOT [--values FILE]
Checks, each failing with a message that names the file and the problem:
  1. every non-template YAML file under deploy/ and charts/ parses; deploy manifests have apiVersion/kind
  2. values.yaml validates against values.schema.json
  3. every .Values.x.y used in templates exists in values.yaml and in the schema
  4. every value in values.yaml is documented in the chart README's table
  5. the chart's CRDs are the same files as deploy/crd/, its runtimes deploy/runtimes/'s, and the chart's RBAC
     rules equal deploy/20-rbac.yaml's
  6. the chart's defaults match deploy/30-operator.yaml (replicas, image, args, probes, security context)
  7. deploy/monitoring/prometheusrule.yaml carries exactly deploy/prometheus/rules.yaml's groups, and every
     metric the Grafana dashboard and the rules query is a recording rule or a metric the C code registers
Exit 0 when all pass, 1 otherwise."""
import json, os, re, sys
import yaml, jsonschema

def fail(errors, msg):
    errors.append(msg)

def leaf_paths(d, prefix=""):
    """Dotted paths of values.yaml; maps with free-form keys (annotations, labels, selectors) stop at the map."""
    out = []
    for k, v in d.items():
        p = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v and k not in ("resources", "podAnnotations", "nodeSelector", "labels", "affinity"):
            out += leaf_paths(v, p)
        else:
            out.append(p)
    return out

def schema_has(schema, path):
    node = schema
    for part in path.split("."):
        props = node.get("properties", {})
        if part not in props:
            return False
        node = props[part]
    return True

def values_has(values, path):
    node = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True

def rules_block(text):
    """The first `rules:` list of a ClusterRole, as parsed YAML (template lines are plain YAML there)."""
    m = re.search(r"kind: ClusterRole\n.*?\nrules:\n(.*?)\n---", text, re.S)
    return yaml.safe_load(m.group(1)) if m else None

def main():
    root = sys.argv[1]
    values_file = os.path.join(root, "charts/ringmaster/values.yaml")
    if "--values" in sys.argv:
        values_file = sys.argv[sys.argv.index("--values") + 1]
    chart = os.path.join(root, "charts/ringmaster")
    errors = []

    # 1. YAML validity
    for base in ("deploy", "charts"):
        for dirpath, _, files in os.walk(os.path.join(root, base)):
            if "/templates" in dirpath:
                continue
            for f in files:
                if not f.endswith((".yaml", ".yml")):
                    continue
                p = os.path.join(dirpath, f)
                try:
                    docs = [d for d in yaml.safe_load_all(open(p)) if d is not None]
                except Exception as e:  # noqa: BLE001 - report any parse error
                    fail(errors, f"{p}: invalid YAML: {e}")
                    continue
                if base == "deploy" and "/prometheus" not in dirpath:
                    for d in docs:
                        if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
                            fail(errors, f"{p}: document without apiVersion/kind")

    # 2. schema
    values = yaml.safe_load(open(values_file))
    schema = json.load(open(os.path.join(chart, "values.schema.json")))
    try:
        jsonschema.validate(values, schema)
    except jsonschema.ValidationError as e:
        fail(errors, f"{values_file}: does not match values.schema.json at {'.'.join(map(str, e.path)) or '<root>'}: {e.message}")

    # 3. template references
    used = set()
    for dirpath, _, files in os.walk(os.path.join(chart, "templates")):
        for f in files:
            text = open(os.path.join(dirpath, f)).read()
            used |= set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text))
    for path in sorted(used):
        if not values_has(values, path):
            fail(errors, f"templates use .Values.{path} but values.yaml has no {path}")
        if not schema_has(schema, path):
            fail(errors, f"templates use .Values.{path} but values.schema.json has no {path}")

    # 4. documentation
    readme = open(os.path.join(chart, "README.md")).read()
    for path in leaf_paths(values):
        if f"`{path}`" not in readme:
            fail(errors, f"charts/ringmaster/README.md does not document `{path}`")

    # 5. CRD and RBAC equality
    for crd in ("trainingjobs", "trainingruntimes", "clustertrainingruntimes"):
        crd_chart = os.path.join(chart, f"crds/{crd}.ringmaster.dev.yaml")
        crd_deploy = os.path.join(root, f"deploy/crd/{crd}.ringmaster.dev.yaml")
        if not os.path.exists(crd_chart) or open(crd_chart).read() != open(crd_deploy).read():
            fail(errors, f"charts/ringmaster/crds/{crd}.ringmaster.dev.yaml differs from deploy/crd/")
    # the chart's training runtimes are deploy/runtimes/'s, object for object
    rt_text = open(os.path.join(chart, "templates/runtimes.yaml")).read()
    rt_chart = [d for d in yaml.safe_load_all(re.sub(r"(?s)\{\{.*?\}\}", "", rt_text)) if d]
    rt_deploy = [d for f in sorted(os.listdir(os.path.join(root, "deploy/runtimes"))) if f.endswith(".yaml")
                 for d in yaml.safe_load_all(open(os.path.join(root, "deploy/runtimes", f))) if d]
    if rt_chart != rt_deploy:
        fail(errors, "charts/ringmaster/templates/runtimes.yaml differs from deploy/runtimes/")
    r_chart = rules_block(open(os.path.join(chart, "templates/rbac.yaml")).read())
    r_deploy = rules_block(open(os.path.join(root, "deploy/20-rbac.yaml")).read())
    if r_chart is None or r_chart != r_deploy:
        fail(errors, "ClusterRole rules differ between charts/ringmaster/templates/rbac.yaml and deploy/20-rbac.yaml")

    # 6. defaults equal deploy/
    dep = [d for d in yaml.safe_load_all(open(os.path.join(root, "deploy/30-operator.yaml"))) if d][0]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    if dep["spec"]["replicas"] != values["replicaCount"]:
        fail(errors, "replicaCount differs from deploy/30-operator.yaml")
    if c["image"] != f"{values['image']['repository']}:{values['image']['tag']}":
        fail(errors, "image differs from deploy/30-operator.yaml")
    if c["resources"] != values["resources"]:
        fail(errors, "resources differ from deploy/30-operator.yaml")
    want_args = {
        "--leader-elect": values["leaderElection"]["enabled"],
        f"--metrics-bind-address=:{values['ports']['metrics']}": True,
        f"--health-probe-bind-address=:{values['ports']['probes']}": True,
        f"--rendezvous-bind-address=:{values['ports']['rendezvous']}": True,
        f"--worker-image={values['workerImage']}": True,
        f"--log-format={values['logFormat']}": True,
    }
    for a, present in want_args.items():
        if present and a not in c["args"]:
            fail(errors, f"deploy/30-operator.yaml lacks {a} that the chart's defaults give")
    sc = c["securityContext"]
    if sc.get("readOnlyRootFilesystem") is not True or sc.get("capabilities", {}).get("drop") != ["ALL"] \
            or dep["spec"]["template"]["spec"]["securityContext"].get("runAsNonRoot") is not True:
        fail(errors, "deploy/30-operator.yaml: security context must be runAsNonRoot, readOnlyRootFilesystem, drop ALL")

    # 7. rules and dashboard reference only real metrics
    rules = yaml.safe_load(open(os.path.join(root, "deploy/prometheus/rules.yaml")))
    prule = yaml.safe_load(open(os.path.join(root, "deploy/monitoring/prometheusrule.yaml")))
    if prule.get("spec", {}).get("groups") != rules["groups"]:
        fail(errors, "deploy/monitoring/prometheusrule.yaml differs from deploy/prometheus/rules.yaml")
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    registered = set()
    for d in ("worker", "operator", "common"):
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith(".c"):
                    registered |= set(re.findall(r'"(ringmaster_[a-z0-9_]+)"', open(os.path.join(dirpath, f)).read()))
    def known(name):
        if name in recorded or name in registered:
            return True
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in registered:
                return True
        return False
    texts = [open(os.path.join(root, "deploy/grafana/ringmaster-dashboard.json")).read(),
             open(os.path.join(root, "deploy/prometheus/rules.yaml")).read()]
    json.loads(texts[0])
    for t in texts:
        for name in sorted(set(re.findall(r"\bringmaster[_:][a-z0-9_:]+", t))):
            if name.startswith("ringmaster.") or not known(name):
                fail(errors, f"dashboard/rules query {name}, which no code registers and no rule records")

    for e in errors:
        print("FAIL:", e)
    print(f"chart checks: {len(errors)} problem(s)")
    return 1 if errors else 0

if __name__ == "__main__":
    sys.exit(main())
