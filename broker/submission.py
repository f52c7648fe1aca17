"""The broker's submission path (:meth:`broker.service.Broker.submit_once`): validate, expand,
store in one transaction, queue (issue 12, "Bulk paths").

A request -- one job, or a gLite collection, parametric job or DAG with its nodes (seed 004
Section 3.2; gLite JDL Attributes Specification Sections 3.3, 4 and 5) -- is parsed and expanded
first, so a syntax or validation error anywhere (a node's attribute included) is raised with its
file:line:column before anything is stored. Then its input sandbox is put in place and every row
(the parent and one row per node, each with its own id) is written in one transaction by
:meth:`broker.db.JobStore.create_many`, which returns the records it wrote: a submission reads
nothing back from the database.
"""
from __future__ import annotations

import jdl as jdlmod
from vgrid_runtime.authn import Caller
from vgrid_runtime.job_states import JobState

from . import authz, compound, idempotency
from .db import DuplicateSubmission, Job, new_key
from .transfers import BrokerError, safe_name


def submit_once(broker, text: str, filename: str, input_files: dict[str, bytes],
                who: Caller | None = None, idempotency_key: str | None = None) -> tuple[Job, bool]:
    """Store the request ``text`` (JDL, named ``filename``) with ``input_files`` (name -> bytes)
    for ``who`` through ``broker`` (a :class:`broker.service.Broker`); ``(the job or compound
    parent, created)``. Errors: see
    :meth:`broker.service.Broker.submit_once`."""
    job_desc = jdlmod.parse_jdl(text, filename, local_files=False)
    owner = authz.submitter(who, job_desc.virtual_organisation) if who is not None else None
    idem = None
    if idempotency_key is not None:
        idem = (idempotency.scope_of(owner.dn if owner else None), idempotency.check_key(idempotency_key))
        found = idempotency.earlier(broker.store, *idem, text)
        if found is not None:
            return found, False
    specs = compound.expansion_specs(job_desc, text, filename)
    for spec in specs if owner is not None else []:
        spec["owner"] = owner.to_json()
    specs[0]["idempotency"] = idem
    needed = [n for n in job_desc.input_sandbox if "://" not in n]
    uploaded = {safe_name(n): data for n, data in input_files.items()}
    missing = [n for n in needed if safe_name(n) not in uploaded]
    if missing:
        raise BrokerError(f"{filename}: InputSandbox file(s) not uploaded: {', '.join(missing)}",
                          field="InputSandbox")
    now = broker.clock.now()
    # the complete input sandbox is in place under the key before the rows are committed,
    # and removed if they are not (broker/sandbox_store.py); nodes read the parent's sandbox
    specs[0]["key"] = specs[0].get("key") or new_key()
    for spec in specs:
        spec["state"] = JobState.SUBMITTED if spec.get("depends_on") else JobState.WAITING
    broker.sandboxes.install(broker.sandboxes.stage(uploaded), specs[0]["key"])
    try:
        jobs = broker.store.create_many(specs, now)
    except DuplicateSubmission:  # a concurrent request with the same key stored first
        broker.sandboxes.discard(specs[0]["key"])
        return idempotency.earlier(broker.store, *idem, text), False
    except BaseException:
        broker.sandboxes.discard(specs[0]["key"])
        raise
    job = jobs[0]
    nodes = [j for j in jobs if j.parent_key]
    if nodes and compound.parent_target(nodes)[0] is not None:   # not "Waiting": move the parent
        broker.move_parent(job.key, now)
        job = broker.store.get(job.key)
    broker.wake()
    return job, True
