"""vgrid: a gLite-WMS-style meta-scheduler with virtual worker nodes and VM leases."""
from setuptools import find_packages, setup

setup(
    name="vgrid",
    version="0.1.0",
    description="Grid meta-scheduler (gLite JDL, GLUE/BDII, SFETE) with CPU-capped virtual worker nodes and VM leases",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["broker*", "jdl*", "infosys*", "vwn_agents*", "vgrid_cli*", "vgrid_runtime*"]),
    package_data={"broker.dashboard": ["templates/*.html", "static/*"]},   # the web dashboard (issue 17)
    install_requires=[
        "cheroot>=11.1,<12",   # vgrid_runtime/connections.py relies on its connection manager internals
        "click>=8.1",
        "cryptography>=42",
        "dask[distributed]>=2024.1,<2027",   # vgrid sweep: LocalCluster or an existing scheduler
        "flask>=3.0",
        "lark>=1.1.9",
        "ldap3>=2.9",
        "lxml>=5",
        "matplotlib>=3.8",
        "prometheus-client>=0.20,<1",   # GET /metrics (vgrid_runtime.metrics)
        "pydantic>=2.6,<3",   # GET /openapi.json and request-body models (vgrid_runtime.openapi)
        "numpy>=1.26",
        "orjson>=3.9,<4",   # bulk dispatch bodies (vgrid_runtime.httpclient._post_json_lean)
        "pyasn1>=0.5",
        "pyasn1-modules>=0.3",
        "regex>=2023.0",
        "requests>=2.31",
        "rich>=13",
        "sqlalchemy>=2.0",
    ],
    extras_require={
        # driver = "libvirt" (vwn_agents/drivers): builds against libvirt-dev (scripts/test.sh)
        "libvirt": ["libvirt-python>=9.0,<11"],
        "test": [
            "htcondor>=23.0",
            "hypothesis>=6.100",
            "playwright>=1.48,<2",   # dashboard browser tests, with Debian's chromium (never `playwright install`)
            "psycopg2-binary>=2.9",
            "pytest>=8",
            "pytest-timeout>=2.3",
            "schemathesis>=4.0,<5",   # tests/test_openapi_fuzz.py
        ],
    },
    entry_points={"console_scripts": ["vgrid=vgrid_cli.main:main"]},
)
