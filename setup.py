from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

setup(
    name="ratelimit",
    version="0.4.0",
    description="Emulate thousands of slow or distant links per (host, port) on a Linux router",
    long_description=(HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11",
    packages=[*find_packages(include=["ratelimit", "ratelimit.*"]), "ratelimit.shipped_profiles", "ratelimit.webui"],
    package_dir={"ratelimit.shipped_profiles": "profiles", "ratelimit.webui": "webui"},
    package_data={"ratelimit.shipped_profiles": ["*.toml", "scenarios/*.toml", "traces/*.down", "traces/*.up", "schedules/*.toml"], "ratelimit.webui": ["templates/*", "static/*", "static/vendor/*"]},
    include_package_data=True,
    data_files=[("share/ratelimit/vagrant/provision",
                 ["vagrant/provision/client.sh", "vagrant/provision/server.sh", "vagrant/provision/router.sh"])],
    install_requires=["pyroute2==0.9.7", "flask>=3.0", "waitress>=3.0", "numpy>=1.24"],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.6", "hypothesis>=6", "playwright>=1.40", "wheel>=0.40"],
        "vm": ["virtme-ng==1.42"],
        "bench": ["matplotlib>=3.6", "prometheus_client>=0.20"],  # prometheus_client: bench metrics
        "fleet": ["ansible-core>=2.17", "ansible-lint>=24"],  # the collection in ansible/ (docs/fleet.md)
    },
    entry_points={
        "console_scripts": ["ratelimit=ratelimit.cli.main:run"],
        "pytest11": ["ratelimit = ratelimit.lab.pytest_plugin"],
        "ratelimit.subcommands": ["lab = ratelimit.lab.cli:lab_main", "web = ratelimit.webui.cli:web_main"],
    },
    classifiers=["Programming Language :: Python :: 3", "Operating System :: POSIX :: Linux",
                 "Topic :: System :: Networking"],
)
