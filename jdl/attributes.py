"""The gLite JDL attribute table: type, default, where it applies, allowed values.

Source: gLite JDL Attributes Specification (EGEE-JRA1-TEC-590869, v0.9, "JDL Attributes
Specification" for the WMProxy) Sections 3 (job), 4 (DAG) and 5 (collection); the vgrid
lease extensions (seed 002 Section 4.2, seed 004 Section 4.2) are documented in docs/jdl.md.
Unknown attributes are allowed (kept in the ad and usable from expressions).

Value kinds: string, integer, number (integer or real), boolean, strings (a string or a list
of strings), string-list (a list of strings), classad, classad-list, expression (any; it is
evaluated at match time), parameters (integer or list), time (integer epoch seconds or ISO
8601 string).
"""
from __future__ import annotations

from dataclasses import dataclass

JOB, DAG, COLLECTION = "job", "dag", "collection"
ALL = frozenset({JOB, DAG, COLLECTION})
COMPOUND = frozenset({DAG, COLLECTION})


@dataclass(frozen=True)
class AttributeSpec:
    """One JDL attribute: canonical `name`, value `kind`, the Types it `applies` to,
    `default` (None: no default), allowed string `choices` (case-insensitive), `minimum` for
    numbers, `doc` (one line, units), and whether it is a vgrid `extension`."""

    name: str
    kind: str
    applies: frozenset = ALL
    default: object = None
    choices: tuple = ()
    minimum: float | None = None
    doc: str = ""
    extension: bool = False
    unit: str = ""


def _a(name, kind, applies=ALL, default=None, choices=(), minimum=None, doc="", extension=False,
       unit=""):
    return AttributeSpec(name, kind, frozenset(applies), default, tuple(choices), minimum, doc,
                         extension, unit)


JOB_TYPES = ("normal", "parametric", "interactive", "mpich", "partitionable", "checkpointable",
             "multiple")
LEASE_TYPES = ("best-effort", "advance-reservation", "immediate")
PREEMPTION_CLASSES = ("cancellable", "suspendable", "migratable", "non-preemptable")
REQUEST_ORIGINS = ("external", "local")

_TABLE = [
    _a("Type", "string", ALL, "job", ("job", "dag", "collection"), doc="kind of request"),
    _a("JobType", "strings", {JOB}, "normal", JOB_TYPES,
       doc="kind of job (a list combines kinds, as gLite 2.x allowed)"),
    _a("Executable", "string", {JOB}, doc="command run on the worker node (mandatory for a job)"),
    _a("Arguments", "string", {JOB}, "", doc="command-line arguments"),
    _a("StdInput", "string", {JOB}, doc="file given as standard input"),
    _a("StdOutput", "string", {JOB}, doc="file receiving standard output"),
    _a("StdError", "string", {JOB}, doc="file receiving standard error"),
    _a("InputSandbox", "strings", ALL, [], doc="files sent with the job (paths or URIs)"),
    _a("InputSandboxBaseURI", "string", ALL, doc="base URI of relative InputSandbox entries"),
    _a("OutputSandbox", "strings", {JOB}, [], doc="files brought back after the job"),
    _a("OutputSandboxDestURI", "strings", {JOB}, doc="destination URI of each OutputSandbox file"),
    _a("OutputSandboxBaseDestURI", "string", ALL, doc="base destination URI of output files"),
    _a("Environment", "strings", ALL, [], doc='"NAME=value" settings for the job'),
    _a("Requirements", "expression", ALL, 'other.GlueCEStateStatus == "Production"',
       doc="boolean expression a CE must satisfy"),
    _a("Rank", "expression", ALL, "-other.GlueCEStateEstimatedResponseTime",
       doc="number ordering matching CEs, higher is better"),
    _a("FuzzyRank", "boolean", ALL, False, doc="choose among matching CEs at random, by rank"),
    _a("VirtualOrganisation", "string", ALL, doc="VO the job runs for"),
    _a("RetryCount", "integer", {JOB}, minimum=-1,
       doc="deep resubmissions allowed (-1 counts as 0; capped by the broker's max_retry_count)"),
    _a("ShallowRetryCount", "integer", {JOB}, minimum=-1,
       doc="shallow resubmissions allowed; -1 disables shallow resubmission (every "
           "resubmission is then deep)"),
    _a("ExpiryTime", "integer", ALL, minimum=0, unit="s since epoch",
       doc="time after which the job is no longer submitted"),
    _a("NodeNumber", "integer", {JOB}, minimum=1, doc="CPUs for an MPICH job (old name)"),
    _a("CpuNumber", "integer", {JOB}, minimum=1, doc="CPUs requested"),
    _a("SMPGranularity", "integer", {JOB}, minimum=1, doc="cores per host"),
    _a("HostNumber", "integer", {JOB}, minimum=1, doc="hosts requested"),
    _a("WholeNodes", "boolean", {JOB}, doc="request whole hosts"),
    _a("DataRequirements", "classad-list", ALL, doc="[InputData, DataCatalogType, ...] ads"),
    _a("DataAccessProtocol", "strings", ALL, doc="protocols the job can use for its data"),
    _a("OutputSE", "string", {JOB}, doc="preferred storage element for output data"),
    _a("OutputData", "classad-list", {JOB}, doc="[OutputFile, LogicalFileName, StorageElement]"),
    _a("StorageIndex", "string", ALL, doc="storage index service"),
    _a("UserTags", "classad", ALL, doc="free user annotations"),
    _a("MyProxyServer", "string", ALL, doc="MyProxy server for proxy renewal"),
    _a("HLRLocation", "string", ALL, doc="accounting HLR endpoint"),
    _a("JobProvenance", "string", ALL, doc="job provenance endpoint"),
    _a("PerusalFileEnable", "boolean", {JOB}, False, doc="allow watching output while it runs"),
    _a("PerusalTimeInterval", "integer", {JOB}, minimum=0, unit="s", doc="perusal upload period"),
    _a("PerusalFilesDestURI", "string", {JOB}, doc="where perusal files go"),
    _a("Prologue", "string", {JOB}, doc="command run before the executable"),
    _a("PrologueArguments", "string", {JOB}, doc="prologue arguments"),
    _a("Epilogue", "string", {JOB}, doc="command run after the executable"),
    _a("EpilogueArguments", "string", {JOB}, doc="epilogue arguments"),
    _a("ListenerPort", "integer", {JOB}, minimum=0, doc="interactive job listener port"),
    _a("ListenerHost", "string", {JOB}, doc="interactive job listener host"),
    _a("ListenerPipeName", "string", {JOB}, doc="interactive job listener pipe"),
    _a("Parameters", "parameters", {JOB}, doc="parametric job: count (integer) or values (list)"),
    _a("ParameterStart", "integer", {JOB}, 0, minimum=0, doc="first parameter value"),
    _a("ParameterStep", "integer", {JOB}, 1, minimum=1, doc="parameter increment"),
    _a("ShortDeadlineJob", "boolean", {JOB}, doc="run on a short-deadline queue"),
    _a("EnableWMSFeedback", "boolean", ALL, doc="let the WMS replan a waiting job"),
    _a("AllowZippedISB", "boolean", ALL, doc="input sandbox may be sent zipped"),
    _a("ZippedISB", "strings", ALL, doc="names of zipped input sandbox archives"),
    _a("ReplicaCatalog", "string", ALL, doc="replica catalogue endpoint"),
    _a("Nodes", "nodes", COMPOUND, doc="the DAG / collection nodes"),
    _a("Dependencies", "expression", {DAG}, doc="{ {parent, child}, ... } between DAG nodes"),
    _a("Max_Nodes_Running", "integer", COMPOUND, minimum=1, doc="nodes running at once"),
    _a("DefaultNodeRetryCount", "integer", COMPOUND, minimum=-1, doc="RetryCount of nodes"),
    _a("DefaultNodeShallowRetryCount", "integer", COMPOUND, minimum=-1,
       doc="ShallowRetryCount of nodes"),
    _a("NodeName", "string", ALL, doc="name of a node inside a DAG / collection"),
    # vgrid lease extensions (docs/jdl.md)
    _a("LeaseType", "string", {JOB}, "best-effort", LEASE_TYPES, extension=True,
       doc="lease kind (seed 002 Section 4.2)"),
    _a("LeaseStart", "time", {JOB}, extension=True, unit="s since epoch or ISO 8601",
       doc="start of an advance reservation"),
    _a("LeaseDuration", "integer", {JOB}, minimum=1, extension=True, unit="s",
       doc="length of the lease"),
    _a("VMImage", "string", {JOB}, extension=True, doc="URI of the VM image to boot"),
    _a("VMImageSize", "integer", {JOB}, minimum=1, extension=True, unit="MB",
       doc="size of the VM image"),
    _a("VMMemory", "integer", {JOB}, minimum=1, extension=True, unit="MB",
       doc="memory of the VM"),
    _a("PreemptionClass", "string", {JOB}, "non-preemptable", PREEMPTION_CLASSES,
       extension=True, doc="what the lease scheduler may do to the lease (seed 002 Sec. 4.2)"),
    _a("RequestOrigin", "string", {JOB}, "external", REQUEST_ORIGINS, extension=True,
       doc="p(L) of seed 002 Sec. 2.1: a local request may preempt external leases"),
    _a("LeaseDeadline", "time", {JOB}, extension=True, unit="s since epoch or ISO 8601",
       doc="when the lease must have ended (seed 002 Sec. 4.2, deadline-constrained)"),
    _a("FeteRank", "boolean", ALL, extension=True,
       doc="rank CEs by SFETE (seed 004 Section 4.2) instead of Rank"),
]

ATTRIBUTES: dict[str, AttributeSpec] = {a.name.lower(): a for a in _TABLE}
STRUCTURAL = {"type", "nodes", "dependencies", "defaultnoderetrycount",
              "defaultnodeshallowretrycount", "max_nodes_running", "nodename"}


def spec(name: str) -> AttributeSpec | None:
    """The AttributeSpec of `name` (case-insensitive) or None for an unknown attribute."""
    return ATTRIBUTES.get(name.lower())


def table_markdown() -> str:
    """The attribute table as Markdown (docs/jdl.md is generated from it)."""
    rows = ["| attribute | value | applies to | default | notes |", "|---|---|---|---|---|"]
    for a in _TABLE:
        applies = "all" if a.applies == ALL else ", ".join(sorted(a.applies))
        default = "" if a.default is None else f"`{a.default!r}`".replace("'", '"')
        notes = a.doc
        if a.choices:
            notes += "; one of " + ", ".join(f'"{c}"' for c in a.choices)
        if a.minimum is not None:
            notes += f"; >= {a.minimum:g}"
        if a.unit:
            notes += f"; unit: {a.unit}"
        if a.extension:
            notes += " (vgrid extension)"
        rows.append(f"| {a.name} | {a.kind} | {applies} | {default} | {notes} |")
    return "\n".join(rows)
