#!/usr/bin/env python3
"""Every manifest in examples/k8s/, validated strictly, as an API server of each version would.

- Built-in kinds (Service, ServiceAccount, Job) against Kubernetes' own JSON schemas
  (PyPI's kubernetes-validate) of the oldest and the newest version docs/deploy.md claims, and of
  every version between them, with unknown fields refused.
- PyTorchJob and JobSet against their CRDs' OpenAPI schemas (tests/k8s/crds/, the operators'
  files as released), made strict: an object with declared properties takes no others (an API
  server prunes them silently, so that a misspelled field does nothing: worse than an error).
  Their pod and Job templates are also checked against Kubernetes' schemas of each version,
  wrapped as a PodTemplate and a Job.
- The check can fail: each manifest is damaged in three ways (an unknown field, a misspelled
  one, a wrong type) and each damage must be refused.

    validate_manifests.py [EXAMPLES_DIR]
"""
import copy
import glob
import os
import sys

import jsonschema
import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The versions docs/deploy.md claims: 1.26 (podFailurePolicy on by default) to 1.37.
VERSIONS = [f"1.{minor}.0" for minor in range(26, 38)]
CRDS = {("kubeflow.org/v1", "PyTorchJob"): "kubeflow.org_pytorchjobs.yaml",
        ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_jobsets.yaml"}


def strict(schema):
    """The schema with additionalProperties: false wherever an object declares its properties and
    does not keep unknown fields (x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_schema(api_version, kind):
    with open(os.path.join(HERE, "crds", CRDS[api_version, kind])) as f:
        crd = yaml.safe_load(f)
    version = api_version.split("/")[1]
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return strict(v["schema"]["openAPIV3Schema"])
    raise SystemExit(f"FAIL: {CRDS[api_version, kind]} serves no {version}")


def templates(doc):
    """The built-in objects inside a custom resource, as resources kubernetes-validate checks."""
    if doc["kind"] == "PyTorchJob":
        for name, replica in doc["spec"]["pytorchReplicaSpecs"].items():
            yield f"pytorchReplicaSpecs.{name}.template", {
                "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": replica["template"]}
    if doc["kind"] == "JobSet":
        for job in doc["spec"]["replicatedJobs"]:
            yield f"replicatedJobs.{job['name']}.template", {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"}, "spec": job["template"]["spec"]}


def errors(doc):
    """What is wrong with one manifest document, at every version: a list of messages."""
    found = []
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRDS:
        validator = jsonschema.Draft7Validator(crd_schema(*key))
        for e in validator.iter_errors(doc):
            found.append(f"{key[1]} {'.'.join(map(str, e.path))}: {e.message}")
        # The PyTorchJob CRD describes restartPolicy's values but does not enumerate them.
        for name, replica in (doc["spec"].get("pytorchReplicaSpecs") or {}).items():
            if replica.get("restartPolicy", "Never") not in ("Always", "OnFailure", "Never", "ExitCode"):
                found.append(f"PyTorchJob {name}.restartPolicy: {replica['restartPolicy']!r} is none of Always, "
                             "OnFailure, Never, ExitCode")
        built_in = list(templates(doc))
    else:
        built_in = [("", doc)]
    for where, resource in built_in:
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                found.append(f"{doc.get('kind')} {where} (Kubernetes {version}): {e.message} at "
                             f"{'.'.join(map(str, e.path))}")
            except kubernetes_validate.SchemaNotFoundError as e:
                found.append(f"{doc.get('kind')}: no schema for {resource.get('kind')} at {version}: {e}")
    return found


def damaged(doc):
    """Three damaged copies of a document: an unknown field, a misspelled one, a wrong type --
    each deep in its pod spec, where a slip is easiest to miss."""
    def pod_spec(d):
        if d["kind"] == "PyTorchJob":
            return next(iter(d["spec"]["pytorchReplicaSpecs"].values()))["template"]["spec"]
        if d["kind"] == "JobSet":
            return d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        if d["kind"] == "Job":
            return d["spec"]["template"]["spec"]
        return None

    if pod_spec(doc) is None:
        return []
    out = []
    unknown = copy.deepcopy(doc)
    pod_spec(unknown)["containers"][0]["gpus"] = 8
    out.append(("an unknown field (containers[0].gpus)", unknown))
    misspelled = copy.deepcopy(doc)
    spec = pod_spec(misspelled)
    spec["terminationGracePeriodSecond"] = spec.pop("terminationGracePeriodSeconds")
    out.append(("a misspelled field (terminationGracePeriodSecond)", misspelled))
    wrong = copy.deepcopy(doc)
    pod_spec(wrong)["terminationGracePeriodSeconds"] = "150"
    out.append(("a wrong type (terminationGracePeriodSeconds: \"150\")", wrong))
    return out


def main():
    examples = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "examples", "k8s")
    files = sorted(glob.glob(os.path.join(examples, "*.yaml")))
    kinds, failures, damages = set(), [], 0
    for path in files:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            kinds.add(doc["kind"])
            for message in errors(doc):
                failures.append(f"{os.path.relpath(path, ROOT)}: {message}")
            for what, bad in damaged(doc):
                damages += 1
                if not errors(bad):
                    failures.append(f"{os.path.relpath(path, ROOT)}: {doc['kind']} with {what} was accepted")
        print(f"{os.path.relpath(path, ROOT)}: {', '.join(d['kind'] for d in docs)}")
    for kind in ("Job", "PyTorchJob", "JobSet"):
        if kind not in kinds:
            failures.append(f"no {kind} among the manifests of {examples}")
    for message in failures:
        print(f"FAIL: {message}")
    if failures:
        raise SystemExit(1)
    print(f"{len(files)} manifests valid at Kubernetes {VERSIONS[0]} to {VERSIONS[-1]} and against the "
          f"PyTorchJob and JobSet CRDs; {damages} damaged copies all refused")


if __name__ == "__main__":
    main()
