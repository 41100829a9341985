"""The manifest writer: the rendered files' text, and the directory it writes them to.

- :mod:`~eks_inference.output.writer`: writes a platform's rendered files to ``--out``.
- :mod:`~eks_inference.output.directory`: the files the writer owns there, replaced all or
  nothing, never a file it did not write.
- :mod:`~eks_inference.output.yaml_dump`, :mod:`~eks_inference.output.yaml_text`: the YAML,
  byte for byte libyaml's; :mod:`~eks_inference.output.json_text`: the dashboards' JSON.

It takes text the charts rendered (:func:`eks_inference.charts.render.render_files`) and
imports nothing of them, so the charts use its YAML writer without a circle of imports.
"""
