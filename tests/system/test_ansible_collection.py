"""Issue #27: the cpctl.controlplane collection as Ansible sees it, without a cluster.

* its version is cpctl's (setup.cfg) and ``ansible-galaxy collection build`` builds it;
* ``ansible-doc`` renders every module, and lists them all;
* the checks of ``ansible-test sanity`` that apply and run offline (it downloads pip and its
  requirements into venvs, which a CI without the Internet cannot): compile, action-plugin-docs
  (every action plugin has its module's documentation), validate-modules' core (each module's
  DOCUMENTATION options agree with its argument_spec: names, types, defaults, choices, required,
  elements; EXAMPLES and RETURN are YAML; the examples use the FQCN and only documented options),
  runtime-metadata, shebang, no-assert, line endings, no smart quotes, yamllint's basics.
"""

from __future__ import annotations

import configparser
import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible_collections" / "cpctl" / "controlplane"
MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py"))
EXPECTED = ["confirm", "controlplane_info", "etcd_alarm", "etcd_defrag", "etcd_info", "etcd_snapshot", "static_pod",
            "static_pod_flags", "static_pod_manifest"]
BIN = os.path.dirname(sys.executable)


def _tool(name: str) -> str:
    found = shutil.which(name, path=BIN) or shutil.which(name)
    assert found, "%s is not installed (ansible-core is a test dependency)" % name
    return found


def lines_about_the_collection(stderr: str) -> List[str]:
    """The lines of an Ansible tool's stderr that concern this collection: an error of the tool's own
    (``ERROR!``, ``[ERROR]``), or any line that names the collection, one of its modules or its files.
    Other packages' warnings are not the collection's (cryptography 51 made ansible-core's own imports
    print a CryptographyDeprecationWarning about DSA on every run, issue 44): the tool's exit code and
    these lines judge it, not the absence of any warning."""
    ours = ("cpctl.controlplane", "cpctl/controlplane", str(COLLECTION))
    return [line for line in stderr.splitlines()
            if line.lstrip().startswith(("ERROR!", "[ERROR]")) or any(name in line for name in ours)]


def test_lines_about_the_collection_keep_its_own_and_drop_other_packages_warnings() -> None:
    warning = ("/venv/lib/python3.11/site-packages/ansible/module_utils/_internal/_ssh_agent.py:12: "
               "CryptographyDeprecationWarning: DSA is deprecated\n  from cryptography.hazmat import dsa")
    assert lines_about_the_collection(warning) == []
    ours = "[WARNING]: cpctl.controlplane.flags: invalid documentation"
    assert lines_about_the_collection(warning + "\n" + ours) == [ours]
    assert lines_about_the_collection("ERROR! Unexpected Exception") == ["ERROR! Unexpected Exception"]
    path = "%s/plugins/modules/flags.py:3: SyntaxWarning: invalid escape" % COLLECTION
    assert lines_about_the_collection(path) == [path]


def _env(tmp: Path) -> Dict[str, str]:
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO), ANSIBLE_NOCOLOR="1", HOME=str(tmp),
                ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))


def _module_source(name: str) -> str:
    return (COLLECTION / "plugins" / "modules" / (name + ".py")).read_text()


def _doc(name: str, part: str) -> Any:
    """DOCUMENTATION/EXAMPLES/RETURN of a module, parsed (without importing it)."""
    match = re.search(r'^%s = r"""\n(.*?)^"""' % part, _module_source(name), re.M | re.S)
    assert match, "%s: no %s" % (name, part)
    return yaml.safe_load(match.group(1))


def _argument_spec(name: str) -> Dict[str, Any]:
    """The module's ARGUMENT_SPEC, imported as Ansible imports it (shared parts from module_utils)."""
    sys.path.insert(0, str(REPO))
    try:
        module = importlib.import_module("ansible_collections.cpctl.controlplane.plugins.modules." + name)
    finally:
        sys.path.remove(str(REPO))
    spec: Dict[str, Any] = module.ARGUMENT_SPEC
    return spec


@functools.cache
def _ansible_doc(*args: str) -> subprocess.CompletedProcess:
    """``ansible-doc -t module ARGS`` for every module of the collection at once: one Ansible start
    (~0.8 s of CPU) instead of one per module, shared by this file's tests."""
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run([_tool("ansible-doc"), "-t", "module", *args]
                              + ["cpctl.controlplane." + name for name in EXPECTED],
                              capture_output=True, text=True, timeout=300, env=_env(Path(tmp)))


def _rendered_json(name: str) -> Dict[str, Any]:
    """What ``ansible-doc --json`` renders for one module (its doc, examples, return values)."""
    proc = _ansible_doc("--json")
    assert proc.returncode == 0 and not lines_about_the_collection(proc.stderr), proc.stderr
    rendered: Dict[str, Any] = json.loads(proc.stdout)["cpctl.controlplane." + name]
    return rendered


def _rendered_text(name: str) -> str:
    """One module's part of ``ansible-doc``'s text (each starts ``> MODULE cpctl.controlplane.NAME``)."""
    proc = _ansible_doc()
    assert proc.returncode == 0 and not lines_about_the_collection(proc.stderr), proc.stderr
    parts = re.split(r"^> MODULE cpctl\.controlplane\.(\w+)\b", re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout), flags=re.M)
    texts = dict(zip(parts[1::2], parts[2::2]))
    assert sorted(texts) == EXPECTED, sorted(texts)
    return texts[name]


def _rendered(name: str) -> Dict[str, Any]:
    """The module's documentation as ansible-doc renders it: its own text merged with the doc fragments."""
    doc: Dict[str, Any] = _rendered_json(name)["doc"]
    return doc


def test_the_collection_has_every_module() -> None:
    assert MODULES == EXPECTED
    actions = sorted(p.stem for p in (COLLECTION / "plugins" / "action").glob("*.py"))
    assert actions == EXPECTED                       # action-plugin-docs: each action has its module's docs


def test_version_is_cpctls_and_the_collection_builds(tmp_path: Path) -> None:
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("cpctl", "controlplane")
    assert galaxy["version"] == setup["metadata"]["version"]
    proc = subprocess.run([_tool("ansible-galaxy"), "collection", "build", str(COLLECTION), "--output-path",
                           str(tmp_path)], capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    artifact = tmp_path / ("cpctl-controlplane-%s.tar.gz" % galaxy["version"])
    with tarfile.open(artifact) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert manifest["collection_info"]["version"] == galaxy["version"]
    for name in EXPECTED:
        assert "plugins/modules/%s.py" % name in names and "plugins/action/%s.py" % name in names
    assert "plugins/plugin_utils/cpctl.py" in names and not any("__pycache__" in n for n in names)


@pytest.mark.slow      # ansible-doc's list, text and JSON of every module: seconds
def test_ansible_doc_renders_every_module(tmp_path: Path) -> None:
    doc = _tool("ansible-doc")
    listed = subprocess.run([doc, "-t", "module", "-l", "cpctl.controlplane"], capture_output=True, text=True,
                            timeout=120, env=_env(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert sorted(re.findall(r"^cpctl\.controlplane\.(\w+)", listed.stdout, re.M)) == EXPECTED
    for name in EXPECTED:
        text = _rendered_text(name)
        assert "OPTIONS" in text and "EXAMPLES" in text and "RETURN VALUES" in text
        assert "corresponding action plugin" in text
        for option in _argument_spec(name):
            assert re.search(r"^[-=]?\s*%s(\s|$)" % re.escape(option), text, re.M), (name, option)
        rendered = _rendered_json(name)
        assert rendered["doc"]["attributes"]["check_mode"]["support"] == "full"


TYPE_DEFAULTS = {"str": "str", "path": "path", "bool": "bool", "int": "int", "float": "float", "dict": "dict",
                 "list": "list"}


@pytest.mark.parametrize("name", EXPECTED)
def test_validate_modules_documentation_matches_argument_spec(name: str) -> None:
    doc = _rendered(name)
    assert doc["module"] == name and doc["short_description"] and doc["description"] and doc["author"]
    assert doc["version_added"]
    options, spec = doc.get("options") or {}, _argument_spec(name)
    assert sorted(options) == sorted(spec), name
    for option, rules in spec.items():
        documented = options[option]
        assert documented.get("description"), (name, option)
        assert documented.get("type", "str") == TYPE_DEFAULTS[rules.get("type", "str")], (name, option)
        assert documented.get("default") == rules.get("default"), (name, option)
        assert bool(documented.get("required")) == bool(rules.get("required")), (name, option)
        assert documented.get("choices") == rules.get("choices"), (name, option)
        assert documented.get("elements") == rules.get("elements"), (name, option)
        assert not (rules.get("required") and "default" in rules), (name, option)
    assert "supports_check_mode=True" in _module_source(name)
    returned = _doc(name, "RETURN")
    assert isinstance(returned, dict) and all(v.get("description") and v.get("returned") for v in returned.values())
    examples = _doc(name, "EXAMPLES")
    assert isinstance(examples, list) and examples
    for task in examples:
        module = "cpctl.controlplane." + name
        if module in task:
            assert set(task[module] or {}) <= set(spec), (name, task)
    assert any("cpctl.controlplane." + name in t for t in examples)


def _fragment_section(fragment: str, name: str) -> Dict[str, Any]:
    """One section (``DOCUMENTATION``, ``THRESHOLDS``, ...) of a doc fragment of the collection, parsed."""
    text = (COLLECTION / "plugins" / "doc_fragments" / (fragment + ".py")).read_text()
    return dict(yaml.safe_load(text.split('%s = r"""' % name, 1)[1].split('"""', 1)[0]))


def test_shared_options_are_written_once() -> None:
    """The manifest-changing modules take their common options from one doc fragment and one spec:
    none repeats them in its own DOCUMENTATION (they cannot drift apart)."""
    shared = set(_fragment_section("manifest_change", "DOCUMENTATION")["options"])
    for name in ("static_pod_manifest", "static_pod_flags"):
        doc = _doc(name, "DOCUMENTATION")
        assert "cpctl.controlplane.manifest_change" in doc["extends_documentation_fragment"], name
        assert not shared & set(doc.get("options") or {}), (name, shared & set(doc["options"]))
        assert shared <= set(_argument_spec(name)) and shared <= set(_rendered(name)["options"]), name


def test_every_module_takes_the_common_attributes_from_one_fragment() -> None:
    """The support levels every module shares (platform, action, async, bypass_host_loop) are written
    once, in ``doc_fragments/attributes.py``: every module extends it after ansible-core's
    action_common_attributes, none repeats those attributes, no other fragment of the collection
    carries them, and each module's rendered documentation has them as the fragment says."""
    common = _fragment_section("attributes", "DOCUMENTATION")["attributes"]
    assert set(common) == {"platform", "action", "async", "bypass_host_loop"}
    for fragment in ("etcd", "manifest_change"):
        assert not set(common) & set(_fragment_section(fragment, "DOCUMENTATION").get("attributes") or {})
    for name in EXPECTED:
        doc = _doc(name, "DOCUMENTATION")
        extends = doc["extends_documentation_fragment"]
        assert "cpctl.controlplane.attributes" in extends, name
        assert extends.index("ansible.builtin.action_common_attributes.flow") < extends.index(
            "cpctl.controlplane.attributes"), name
        assert not set(common) & set(doc.get("attributes") or {}), name
        rendered = _rendered(name)["attributes"]
        for key, value in common.items():
            assert {k: rendered[key][k] for k in value} == value, (name, key)


def test_etcd_modules_share_their_options_and_notes_once() -> None:
    """The etcd modules take their host-variable note from ``doc_fragments/etcd.py``, the thresholds
    and the defragmentation timeout from its THRESHOLDS / DEFRAG_TIMEOUT sections and
    ``module_utils/specs.py`` (their attributes from the collection's common fragment, tested above):
    none repeats them, and the rendered documentation has them."""
    def section(name: str) -> Dict[str, Any]:
        return _fragment_section("etcd", name)
    assert any("same host variables" in note for note in section("DOCUMENTATION")["notes"])
    for name in ("etcd_info", "etcd_defrag", "etcd_alarm", "etcd_snapshot"):
        doc = _doc(name, "DOCUMENTATION")
        extends = doc["extends_documentation_fragment"]
        assert "cpctl.controlplane.etcd" in extends, name
        assert not any("same host variables" in note for note in doc.get("notes") or []), name
        rendered = _rendered(name)
        assert any("same host variables" in n for n in rendered["notes"]), name
        for part, spec in (("thresholds", "THRESHOLDS"), ("defrag_timeout", "DEFRAG_TIMEOUT")):
            shared = set(section(spec)["options"])
            if "cpctl.controlplane.etcd." + part in extends:
                assert not shared & set(doc.get("options") or {}), (name, part)
                assert shared <= set(_argument_spec(name)) and shared <= set(rendered["options"]), (name, part)


def _python_files() -> List[Path]:
    """The collection's plugins (not tests/unit, nor ansible-test's tests/output)."""
    return sorted((COLLECTION / "plugins").rglob("*.py"))


def test_sanity_compile_shebang_no_assert_line_endings() -> None:
    for path in _python_files():
        text = path.read_text(encoding="utf-8")
        compile(text, str(path), "exec")
        assert "\r" not in text and text.endswith("\n"), path
        assert not re.search("[\u2018\u2019\u201c\u201d]", text), "smart quotes in %s" % path
        assert not re.search(r"^\s*assert ", text, re.M), "assert in %s (stripped under -O)" % path
        shebang = text.startswith("#!")
        assert shebang == (path.parent.name == "modules"), path
        if shebang:
            assert text.splitlines()[0] == "#!/usr/bin/python", path
            assert not os.access(path, os.X_OK), "%s: modules are not executable files" % path


def test_sanity_yaml_files_and_runtime_metadata() -> None:
    for path in sorted(p for p in COLLECTION.rglob("*.yml") if "output" not in p.relative_to(COLLECTION).parts):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("---\n") and "\t" not in text and text.endswith("\n"), path
        assert not re.search(r"[ \t]+$", text, re.M), "trailing spaces in %s" % path
        yaml.safe_load(text)
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"].startswith(">=")
    assert sorted(runtime["action_groups"]["cpctl"]) == EXPECTED


def test_requires_ansible_is_bounded_by_the_ansible_core_it_is_tested_with() -> None:
    """Issue 48: ``requires_ansible`` has an upper bound, and it is the one the tests stand behind: the
    ansible-core these tests run (the lock's) satisfies it, and the bound is the next minor release
    after it - a newer ansible-core in the lock fails here until the bound is moved with it."""
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    spec = SpecifierSet(yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())["requires_ansible"])
    tested = Version(version("ansible-core"))
    assert tested in spec, (str(spec), str(tested))
    uppers = [Version(s.version) for s in spec if s.operator == "<"]
    assert uppers == [Version("%d.%d" % (tested.major, tested.minor + 1))], str(spec)
    assert Version("%d.%d.0" % (tested.major, tested.minor + 1)) not in spec


def test_the_examples_pass_ansible_lint() -> None:
    """ansible-lint (its default rules, yaml line length included) on the shipped example playbooks,
    with this collection resolvable as an installed one (issue 48)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO), NO_COLOR="1", PATH=BIN + os.pathsep +
               os.environ.get("PATH", ""))
    proc = subprocess.run([_tool("ansible-lint"), "--offline", "--nocolor", "-q", "."],
                          cwd=REPO / "examples" / "ansible", capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
