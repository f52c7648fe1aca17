"""Policy plug points of the lease engine: preemption and host selection, selected by name."""
import pytest

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, SimulatedNodes, uniform_site
from vwn_agents.leasing import candidatepolicy, hostselection, preemption
from vwn_agents.leasing.config import OPTIONS, ConfigError
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector

VM = resource_vector(cpu=100, memory=512)


def _ar_after_running_be(policy):
    """One one-core node busy with a best-effort lease; then an AR wants the node."""
    clock = SimulatedClock(0.0)
    site = uniform_site(1, 1, 1024)
    sched = LeaseScheduler(site, LeaseConfig({"policy-preemption": policy}), clock, SimulatedNodes(site))
    be = sched.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 1000.0, 1, VM))
    sched.process(0.0)
    assert be.state is LeaseState.ACTIVE
    clock.advance_to(10.0)
    ar = sched.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 10.0, 100.0, 1, VM, preemptible=False,
                            requested_start_s=200.0))
    return sched, ar


def test_ar_that_needs_preemption_is_accepted_under_ar_preempts_everything():
    sched, ar = _ar_after_running_be("ar-preempts-everything")
    assert ar.state is LeaseState.SCHEDULED
    assert isinstance(sched.policy, preemption.PreemptionPolicy)


def test_ar_that_needs_preemption_is_rejected_under_no_preemption():
    sched, ar = _ar_after_running_be("no-preemption")
    assert ar.state is LeaseState.REJECTED
    assert "not enough resources" in ar.reject_reason
    assert isinstance(sched.policy, preemption.NoPreemption)


@pytest.mark.parametrize("option", ["policy-preemption", "policy-host-selection"])
def test_unknown_policy_name_is_a_config_error_naming_the_option(option):
    with pytest.raises(ConfigError, match=option):
        LeaseConfig({option: "no-such-policy"})


def test_policy_choices_are_the_registered_policies():
    choices = {o.name: set(o.choices) for o in OPTIONS}
    assert choices["policy-preemption"] == set(preemption.POLICIES) | set(candidatepolicy.POLICIES)
    assert not set(preemption.POLICIES) & set(candidatepolicy.POLICIES)
    assert choices["policy-host-selection"] == set(hostselection.POLICIES)
    with pytest.raises(ConfigError, match="policy-preemption"):
        preemption.preemption_policy("no-such-policy")
    with pytest.raises(ConfigError, match="policy-host-selection"):
        hostselection.host_selection_policy("no-such-policy", None, None)


def test_greedy_host_selection_scores_image_reuse_then_vms():
    cfg = LeaseConfig({"lease-preparation": "imagetransfer"})
    site = uniform_site(2, 1, 1024)
    sched = LeaseScheduler(site, cfg, SimulatedClock(0.0), SimulatedNodes(site))
    assert isinstance(sched.host_selection, hostselection.GreedyHostSelection)
    score = sched.host_score(Lease(1, LeaseType.BEST_EFFORT, 0.0, 10.0, 1, VM, "img", 100.0))
    assert score(0, 3) == (0, 3) and score(1, 1) == (0, 1)  # no image anywhere yet: by VMs
    unmanaged = LeaseScheduler(site, LeaseConfig(), SimulatedClock(0.0), SimulatedNodes(site))
    assert unmanaged.host_score(Lease(2, LeaseType.BEST_EFFORT, 0.0, 10.0, 1, VM)) is None
