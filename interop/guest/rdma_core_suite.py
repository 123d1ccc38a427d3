# rdma_core_suite.py DEV GID MODULE... -- rdma-core's own test suite (the copy python3-pyverbs
# installs under /usr/share/doc/rdma-core/tests) on the RDMA device DEV, GID index GID, in a guest.
# Each module (mr, qp, ...) runs in a python process of its own, so a module that crashes its
# interpreter (a provider fault, say) costs only its own results. Prints, as each test ends,
#   RDMA-CORE: <test id> ok|skipped|FAIL|ERROR
# and after each module
#   RDMA-CORE-MODULE: test_<module> rc=<exit status>
# interop/rdmacore-run.sh reads these lines and counts them.
import gzip
import os
import shutil
import subprocess
import sys
import unittest

SOURCE = '/usr/share/doc/rdma-core/tests'
# The suite's package must be importable as "tests" (ids are tests.test_*); RDMA_CORE_TOP puts
# it, and the modules' logs, elsewhere (a user's own folder on a shared host).
TOP = os.environ.get('RDMA_CORE_TOP', '/tmp/rdma-core')


def unpack():
    dst = os.path.join(TOP, 'tests')
    if os.path.isdir(dst):
        return
    shutil.copytree(SOURCE, dst)
    for name in os.listdir(dst):
        if name.endswith('.gz'):
            path = os.path.join(dst, name)
            with gzip.open(path) as z, open(path[:-3], 'wb') as out:
                out.write(z.read())
            os.remove(path)


class Reporter(unittest.TextTestResult):
    def _line(self, test, what):
        print('RDMA-CORE: %s %s' % (test.id(), what), file=sys.__stdout__, flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(test, 'ok')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(test, 'skipped')

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(test, 'FAIL')

    def addError(self, test, err):
        super().addError(test, err)
        self._line(test, 'ERROR')


def one_module(dev, gid, module):
    """Runs in the child: the suite reads its device and GID from its own argument parser."""
    sys.path[:0] = [TOP, os.path.join(TOP, 'tests')]
    sys.argv = [sys.argv[0], '--dev', dev, '--gid', gid]
    from args_parser import parser
    parser.parse_args()
    import tests
    if not hasattr(tests, 'test_' + module):
        print('RDMA-CORE-MODULE: test_%s is not in the suite' % module, file=sys.__stdout__, flush=True)
        return 2
    suite = unittest.defaultTestLoader.loadTestsFromModule(getattr(tests, 'test_' + module))
    with open(os.path.join(TOP, 'test-%s.log' % module), 'w') as log:
        result = unittest.TextTestRunner(stream=log, resultclass=Reporter, verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--one':
        sys.exit(one_module(*sys.argv[2:5]))
    if len(sys.argv) < 4:
        sys.exit('usage: rdma_core_suite.py DEV GID MODULE...')
    dev, gid, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
    unpack()
    for module in modules:
        try:
            rc = subprocess.run([sys.executable, __file__, "--one", dev, gid, module], timeout=600).returncode
            if rc < 0:  # killed by a signal: the status a shell would show
                rc = 128 - rc
        except subprocess.TimeoutExpired:
            rc = 'timeout'
        print('RDMA-CORE-MODULE: test_%s rc=%s' % (module, rc), flush=True)


if __name__ == '__main__':
    main()
