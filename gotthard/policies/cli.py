"""``gotthard policy eval|test|kube-bench`` and ``gotthard audit kube-bench|cluster``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from gotthard.cli_common import command_group
from gotthard.config import Config
from gotthard.policies import audit, bundle, constraints, gatekeeper, kube_bench, metrics, testing
from gotthard.policies import engine as eng

EXIT_ALLOWED, EXIT_DENIED, EXIT_BAD_INPUT = 0, 1, 2


def _err(msg: str, args: argparse.Namespace | None = None) -> int:
    """*msg* on stderr, prefixed with the command run (``gotthard audit`` for ``audit
    kube-bench``, which shares its handler with ``policy kube-bench``); exit 2."""
    command = getattr(args, "command", None) or "policy"
    print(f"gotthard {command}: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _data(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return constraints.policy_data(getattr(args, "data", None), extra)[0]


def _constrained(args: argparse.Namespace, cfg: Config) -> constraints.Constrained:
    """``data.gotthard`` with the constraints of ``[policies]`` and ``--data``."""
    return constraints.constrained_data(cfg.policies, getattr(args, "data", None))


def cmd_eval(args: argparse.Namespace, cfg: Config) -> int:
    try:
        doc = eng.load_file(args.input)
        reports = kube_bench.inputs_of(doc, policy=args.policy, today=args.today)
        data = _constrained(args, cfg).data
        data = kube_bench.resolve_baseline(data, [r["checks"] for r in reports])
        engine = eng.make_engine(args.engine, data, opa_url=args.opa_url)
        verdict = eng.judge(engine, doc, policy=args.policy, today=args.today)
    except eng.PolicyError as err:
        return _err(str(err))
    # warn-mode violations are reported, and counted in the metrics, but do not deny
    result = eng.decision(verdict.deny, verdict.warn)
    violations = [*verdict.deny, *verdict.warn]
    print(json.dumps(result, indent=2))
    if args.textfile:
        families = metrics.violations_families(metrics.violation_counts(violations))
        try:
            metrics.write_textfile(args.textfile, families)
        except eng.PolicyError as err:
            return _err(str(err))
    return EXIT_ALLOWED if result["allowed"] else EXIT_DENIED


def cmd_rules(args: argparse.Namespace, cfg: Config) -> int:
    try:
        found = _constrained(args, cfg)
    except eng.PolicyError as err:
        return _err(str(err))
    if args.format == "json":
        rules = [s.as_dict() for s in found.states]
        print(json.dumps({"profile": found.profile, "rules": rules}, indent=2))
    else:
        print(constraints.format_rules(found.profile, found.states))
    return EXIT_ALLOWED


def _write(
    args: argparse.Namespace, cfg: Config, write: Callable[[constraints.Constrained], str]
) -> int:
    """Run *write* on the constrained data; print what it reports (exit 0), or exit 2."""
    try:
        report = write(_constrained(args, cfg))
    except eng.PolicyError as err:
        return _err(str(err))
    print(report)
    return EXIT_ALLOWED


def cmd_bundle(args: argparse.Namespace, cfg: Config) -> int:
    def write(found: constraints.Constrained) -> str:
        revision = bundle.write_bundle(args.out, found.data, args.revision)
        return f"wrote {args.out} (revision {revision}; decision {bundle.WEBHOOK_DECISION})"

    return _write(args, cfg, write)


def cmd_gatekeeper(args: argparse.Namespace, cfg: Config) -> int:
    def write(found: constraints.Constrained) -> str:
        written = gatekeeper.write_gatekeeper(args.out, found.data, found.states)
        return f"wrote {len(written)} files to {args.out}"

    return _write(args, cfg, write)


def cmd_test(args: argparse.Namespace, cfg: Config) -> int:
    try:
        results, problems = testing.run_all()
    except eng.PolicyError as err:
        return _err(str(err))
    failed = [r for r in results if not r.ok]
    for r in results:
        if args.verbose or not r.ok:
            status = "ok" if r.ok else "FAIL"
            detail = r.error or ("" if r.ok else f"expected {r.expected}, got {r.got}")
            print(f"{status:4} {r.table}: {r.name} {detail}".rstrip())
    for p in problems:
        print(f"COVERAGE {p}")
    print(
        f"{len(results)} cases: {len(results) - len(failed)} passed, {len(failed)} failed; "
        f"{len(problems)} coverage problems"
    )
    return 0 if not failed and not problems else 1


def cmd_kube_bench(args: argparse.Namespace, cfg: Config) -> int:
    try:
        if args.report:
            doc = eng.load_file(args.report, what="report")
        else:
            doc = kube_bench.run_kube_bench(args.targets, args.check)
        report = kube_bench.parse_report(doc)
        extra = {"waivers": kube_bench.load_waivers(args.waivers)} if args.waivers else None
        only = [c.strip() for c in args.check.split(",") if c.strip()] if args.check else None
        checks = kube_bench.to_input(report, only=only)["checks"]
        data = kube_bench.resolve_baseline(_data(args, extra), [checks])
        engine = eng.make_engine(args.engine, data, opa_url=args.opa_url)
        result = kube_bench.audit(engine, report, today=args.today, only=only)
    except eng.PolicyError as err:
        return _err(str(err), args)
    if args.format == "json":
        out = {k: result[k] for k in ("totals", "failed", "waived", "expired_waivers", "compliant")}
        print(json.dumps(out, indent=2))
    else:
        print(kube_bench.format_text(result))
    if args.textfile:
        families = metrics.kube_bench_families(
            report, result["failed"], waivers=(extra or {}).get("waivers", ())
        )
        try:
            metrics.write_textfile(args.textfile, families)
        except eng.PolicyError as err:
            return _err(str(err), args)
    return 0 if result["compliant"] else 1


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=("embedded", "opa"),
        default="embedded",
        help="embedded: regopy in-process (default); opa: an OPA server",
    )
    p.add_argument(
        "--opa-url",
        default="http://localhost:8181",
        metavar="URL",
        help="OPA server for --engine opa (default http://localhost:8181)",
    )
    _data_arg(p)
    p.add_argument("--today", metavar="YYYY-MM-DD", help=argparse.SUPPRESS)


def _data_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        metavar="FILE",
        help="YAML/JSON deep-merged over the shipped data (keys: site, inventory, waivers;"
        " policies: profile and rules, over [policies] of the site file)",
    )


def _add_kube_bench(commands: Any, name: str = "kube-bench") -> None:
    kb = commands.add_parser(name, help="check kube-bench results against the CIS baseline")
    src = kb.add_mutually_exclusive_group(required=True)
    src.add_argument("--report", metavar="FILE", help="kube-bench --json output")
    src.add_argument("--run", action="store_true", help="run kube-bench run --json here")
    kb.add_argument(
        "--targets", default="master,node,etcd", help="with --run (default %(default)s)"
    )
    kb.add_argument(
        "--check",
        metavar="IDS",
        help="comma-separated check ids (with --run, or to restrict the baseline)",
    )
    kb.add_argument("--waivers", metavar="FILE", help="waivers (id, owner, reason, expires)")
    kb.add_argument("--format", choices=("text", "json"), default="text")
    kb.add_argument(
        "--textfile", metavar="OUT.prom", help="write metrics for the textfile collector"
    )
    _engine_args(kb)
    kb.set_defaults(handler=cmd_kube_bench)


def add_cli(subparsers: Any) -> None:
    """Register ``policy eval|test|kube-bench``; leaves set ``func(args) -> int``."""
    commands = command_group(
        subparsers,
        "policy",
        help="security policies (Rego) and CIS baseline",
        description="Evaluate and test the shipped Rego policies.",
        metavar="{eval,rules,bundle,gatekeeper,test,kube-bench}",
    )

    ev = commands.add_parser(
        "eval", help="evaluate one JSON/YAML input; exit 0 allowed, 1 denied, 2 bad input"
    )
    ev.add_argument("--input", required=True, metavar="FILE")
    ev.add_argument("--policy", choices=sorted(eng.POLICIES), help="default: chosen by kind")
    ev.add_argument("--textfile", metavar="OUT.prom", help="write gotthard_policy_violations")
    _engine_args(ev)
    ev.set_defaults(handler=cmd_eval)

    ru = commands.add_parser(
        "rules", help="list every rule: level, PSS control, parameters, mode, exemptions"
    )
    ru.add_argument("--format", choices=("text", "json"), default="text")
    _data_arg(ru)
    ru.set_defaults(handler=cmd_rules)

    bu = commands.add_parser(
        "bundle", help="build an OPA bundle (tar.gz) that enforces the policies at admission"
    )
    bu.add_argument("--out", required=True, metavar="FILE.tar.gz")
    bu.add_argument("--revision", help="bundle revision (default: a digest of its content)")
    _data_arg(bu)
    bu.set_defaults(handler=cmd_bundle)

    gk = commands.add_parser(
        "gatekeeper", help="write Gatekeeper ConstraintTemplates and Constraints"
    )
    gk.add_argument("--out", required=True, metavar="DIR")
    _data_arg(gk)
    gk.set_defaults(handler=cmd_gatekeeper)

    te = commands.add_parser("test", help="run the shipped policy test tables")
    te.add_argument("-v", "--verbose", action="store_true")
    te.set_defaults(handler=cmd_test)

    _add_kube_bench(commands)


def _add_audit_cluster(commands: Any) -> None:
    ac = commands.add_parser(
        "cluster",
        help="evaluate live pods, namespaces, storage classes and PeerAuthentications",
        description="Audit live objects with the admission and mesh policies; exit 0 clean, "
        "1 violations (0 with --report-only), 2 kubeconfig/API errors.",
    )
    ac.add_argument(
        "--site",
        metavar="NAME",
        help="site to audit (default: the configuration's site); its Kubernetes access comes"
        " from [sites.NAME.clusters.CLUSTER.kubernetes]",
    )
    ac.add_argument(
        "--cluster",
        metavar="NAME",
        help="cluster of that site (default: the installation's own cluster on its own site,"
        " else the site's Kubernetes cluster)",
    )
    ac.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="use this kubeconfig instead of the site model's access",
    )
    ac.add_argument(
        "--context",
        metavar="NAME",
        help="kubeconfig context (with --kubeconfig or"
        " $KUBECONFIG / ~/.kube/config; default: current)",
    )
    ac.add_argument("--format", choices=("text", "json"), default="text")
    ac.add_argument("--textfile", metavar="OUT.prom", help="write gotthard_policy_violations")
    ac.add_argument(
        "--textfile-configmap",
        metavar="NAMESPACE/NAME",
        help="also put those metrics into this existing ConfigMap (key"
        f" {audit.CONFIGMAP_KEY}), which a textfile exporter serves (Kubernetes)",
    )
    ac.add_argument(
        "--report-only",
        action="store_true",
        help="exit 0 when the audit ran, whatever it found: findings are metrics, not a"
        " failed Job (errors still exit 2)",
    )
    _engine_args(ac)
    ac.set_defaults(handler=audit.cmd_cluster)


def add_audit_cli(subparsers: Any) -> None:
    """Register ``audit kube-bench`` (same handler as policy kube-bench) and ``audit cluster``."""
    commands = command_group(
        subparsers, "audit", help="compliance audits", metavar="{kube-bench,cluster}"
    )
    _add_kube_bench(commands)
    _add_audit_cluster(commands)
