"""Fault tests: crashes, broken links and long offline periods, each ending with `assert_converged`."""
