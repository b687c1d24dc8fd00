#!/usr/bin/env bash
# Installs everything the test suite needs on a brand-new Debian 12 machine:
# Debian packages (python3-qpid-proton for interop, libqpid-proton11-dev and a C compiler for
# the benchmark's load generator, pacemaker/corosync/pcs and
# resource-agents for the agent tests, systemd for the unit tests, rpm/lintian for
# packaging, a JDK and Maven for qpid-jms, Chromium for the console), the npm dependencies and
# the Maven artifacts of test/jms. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

packages=(
  python3-qpid-proton        # interop client nobody here wrote
  libqpid-proton11-dev gcc pkg-config   # bench/proton-c, the benchmark's load generator (test/interop/proton-c-loadgen.test.ts)
  pacemaker pacemaker-cli-utils corosync pcs resource-agents   # OCF agent and cluster tests
  systemd libsystemd-dev     # unit tests under a real systemd; sd-notify addon headers
  rpm lintian rpmlint dpkg-dev fakeroot cpio   # building and checking the packages (packaging/build unpacks with cpio)
  shellcheck libxml2-utils   # the OCF agent is shell; ocf-tester checks its meta-data with xmllint
  prometheus                 # promtool checks the shipped alert rules
  iproute2 util-linux procps psmisc openssl strace
  faketime                   # libfaketime steps a running broker's wall clock (test/integration/clock-steps.test.ts)
  g++ make python3           # node-gyp for the sd-notify addon
  default-jdk-headless maven # the qpid-jms interop test (test/jms)
  chromium                   # the web console's browser tests (test/console), driven by playwright-core
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  # Installing pacemaker/corosync/pcs must not start their daemons on this host.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  if [ "$created_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

npm ci --no-audit --no-fund

# qpid-jms and the dependency plugin from Maven Central, so npm test resolves them offline.
mvn -q -B -f test/jms/pom.xml dependency:build-classpath -Dmdep.outputFile=/dev/null
