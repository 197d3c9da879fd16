"""DVC's side of the pipeline: the params.yaml a preset becomes, and the check of output
folders DVC would empty."""
