# The offline default corpus as C4-format files (only when data.source is
# offline-wiki; `local` reads existing files, `hub` streams C4), which the
# tokenize rule reads.

if SETTINGS.data.source == "offline-wiki":

    rule prepare_corpus:
        output:
            directory(RAW_DIR),
        params:
            config=config_file,
            settings=stage_params("prepare-corpus"),
        log:
            f"{DATA_LOG_DIR}/prepare_corpus.log",
        threads: 1
        resources:
            mem_mb=2000,
            runtime=30,
        conda:
            "../envs/adloco.yaml"
        shell:
            "adloco prepare-corpus --config {params.config:q} --out {output:q} > {log:q} 2>&1"
