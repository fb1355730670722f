"""Fakes of optional third-party modules, for contract tests on machines without the hardware."""
