"""aotinfer.integrations.transformers without PyTorch, transformers or a GPU: register() adds the
attention implementation on the transformers versions whose continuous batching runs registered
implementations, and refuses, saying why, those that run only their own. Stand-in modules take
torch's and transformers' places while each test imports the integration. Run against an
installed wheel (tests/python_wheel.sh)."""
import importlib
import sys
import types
import unittest
from unittest import mock

MODULE = "aotinfer.integrations.transformers"


def stand_ins(version, registered):
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float16 = object(), object()
    torch.compiler = types.SimpleNamespace(disable=lambda reason=None: (lambda f: f))
    transformers = types.ModuleType("transformers")
    transformers.__version__ = version
    transformers.AttentionInterface = types.SimpleNamespace(register=lambda key, fn: registered.setdefault(key, fn))
    return {"torch": torch, "transformers": transformers}


class RegisterTest(unittest.TestCase):
    def register(self, version):
        """register() under transformers `version`; returns (its result, what it registered)."""
        registered = {}
        with mock.patch.dict(sys.modules, stand_ins(version, registered)):
            sys.modules.pop(MODULE, None)
            try:
                integration = importlib.import_module(MODULE)
                return integration.register(package=object()), registered
            finally:
                sys.modules.pop(MODULE, None)  # bound to the stand-ins: gone with them

    def test_versions_that_run_registered_implementations(self):
        for version in ("5.17.0", "5.18.1", "5.18.0.dev0"):
            with self.subTest(version=version):
                key, registered = self.register(version)
                self.assertEqual(key, "paged|aotinfer")
                self.assertEqual(list(registered), ["paged|aotinfer"])

    def test_later_versions_are_refused_with_the_reason(self):
        for version in ("5.19.0", "5.25.0", "6.0.0rc1"):
            with self.subTest(version=version):
                with self.assertRaises(RuntimeError) as refused:
                    self.register(version)
                message = str(refused.exception)
                self.assertIn(f"transformers {version}", message)
                self.assertIn("refuses a registered one", message)
                self.assertIn("5.17 and 5.18", message)


if __name__ == "__main__":
    unittest.main()
