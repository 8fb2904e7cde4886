"""MkDocs hooks (mkdocs.yml ``hooks``): the build fails when the option reference page is not
what docs/gen_options.py generates from datasource/option_table.py, so the site cannot show
options the code does not have."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError

_GEN = Path(__file__).resolve().parent / "gen_options.py"


def on_pre_build(config, **kwargs) -> None:
    spec = importlib.util.spec_from_file_location("kafkalog_gen_options", _GEN)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    if gen.PAGE.read_text() != gen.generated():
        raise PluginError(
            f"{gen.PAGE} differs from datasource/option_table.py: run python docs/gen_options.py"
        )
