#!/usr/bin/env python3
"""crd-docs.py — writes the field descriptions of scripts/crd-descriptions.yaml (the one source) into
the CRD's openAPIV3Schema as `description:` keys, so `kubectl explain tj.spec.restartPolicy` explains.

It edits the YAML text in place and touches only `description:` keys: every other key, comment, flow
style and blank line stays byte for byte, so it can be re-run after anyone adds schema keywords
(maximum:, x-kubernetes-validations: ...). Idempotent: a second run changes nothing.

Usage: crd-docs.py [--check] [--crd FILE] [--descriptions FILE]
  --check   write nothing; exit 1 naming what is stale (the committed CRD differs from what this
            script would write), what field has no description, and what description names no field.
"""
import argparse
import json
import sys

import yaml

ROOT_KEY = "TrainingJob"  # descriptions.yaml's key for the schema's root (the kind itself)


def fields(schema_node, path, out):
    """Yield (path, node) for every property of a composed schema mapping, depth first.
    Array items are transparent: status.conditions.type, as kubectl explain names them."""
    props = get(schema_node, "properties")
    if props is not None:
        for k, v in props.value:
            p = f"{path}.{k.value}" if path else k.value
            out.append((p, v))
            fields(v, p, out)
    items = get(schema_node, "items")
    if items is not None and isinstance(items, yaml.MappingNode):
        fields(items, path, out)
    return out


def get(node, key):
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if k.value == key:
            return v
    return None


def quote(text):
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar


def edits_for(text, node, desc):
    """Return a list of (start, end, replacement) text edits that make `node` carry `desc`."""
    if not isinstance(node, yaml.MappingNode):
        raise SystemExit(f"crd-docs: a schema node at line {node.start_mark.line + 1} is not a mapping")
    cur = None
    for k, v in node.value:
        if k.value == "description":
            cur = (k, v)
    want = quote(desc)
    if cur is not None:
        k, v = cur
        if v.value == desc:
            return []
        return [(v.start_mark.index, v.end_mark.index, want)]
    if node.flow_style:
        # {type: number, minimum: 0} -> {type: number, minimum: 0, description: "..."}
        end = node.end_mark.index - 1
        assert text[end] == "}", f"flow mapping at line {node.start_mark.line + 1} does not end with }}"
        sep = ", " if node.value else ""
        return [(end, end, f"{sep}description: {want}")]
    # block mapping: a new line right after the `type:` line (or first, when there is none)
    indent = node.start_mark.column
    anchor = None
    for k, v in node.value:
        if k.value == "type":
            anchor = v
    if anchor is not None:
        pos = text.index("\n", anchor.end_mark.index) + 1
    else:
        first_key = node.value[0][0]
        pos = text.rfind("\n", 0, first_key.start_mark.index) + 1
    return [(pos, pos, " " * indent + f"description: {want}\n")]


def render(crd_text, descriptions):
    doc = yaml.compose(crd_text)
    problems = []
    edits = []
    versions = get(get(doc, "spec"), "versions")
    for ver in versions.value:
        schema = get(get(ver, "schema"), "openAPIV3Schema")
        found = [(ROOT_KEY, schema)] + fields(schema, "", [])
        seen = set()
        for path, node in found:
            seen.add(path)
            desc = descriptions.get(path)
            if not desc:
                problems.append(f"no description for field {path} (add it to scripts/crd-descriptions.yaml)")
                continue
            edits += edits_for(crd_text, node, str(desc).strip())
        for path in descriptions:
            if path not in seen:
                problems.append(f"descriptions.yaml names {path}, which is not a field of the CRD")
    out = crd_text
    for start, end, rep in sorted(edits, key=lambda e: e[0], reverse=True):
        out = out[:start] + rep + out[end:]
    # the result must still say the same thing, plus descriptions
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "description" or not isinstance(v, str)}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o
    a, b = yaml.safe_load(crd_text), yaml.safe_load(out)
    if strip(a) != strip(b):
        raise SystemExit("crd-docs: internal error: the edit changed more than descriptions")
    return out, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--crd", default="deploy/crd/trainingjobs.ringmaster.dev.yaml")
    ap.add_argument("--descriptions", default="scripts/crd-descriptions.yaml")
    a = ap.parse_args()
    with open(a.descriptions, encoding="utf-8") as f:
        descriptions = yaml.safe_load(f) or {}
    with open(a.crd, encoding="utf-8") as f:
        text = f.read()
    out, problems = render(text, descriptions)
    for p in problems:
        print(f"crd-docs: {p}", file=sys.stderr)
    if a.check:
        if out != text:
            print(f"crd-docs: {a.crd} is stale: run `make crd-docs` and commit it", file=sys.stderr)
            return 1
        return 1 if problems else 0
    if out != text:
        with open(a.crd, "w", encoding="utf-8") as f:
            f.write(out)
        print(f"crd-docs: updated {a.crd}")
    else:
        print(f"crd-docs: {a.crd} is up to date")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
