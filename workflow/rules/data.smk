# Data: the offline default corpus as C4-format files (only when
# data.source is offline-wiki; `local` reads existing files, `hub` streams C4),
# then tokenized, packed shards with a manifest that every later stage reads.

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


rule tokenize:
    input:
        tokenize_raw_input(),
    output:
        manifest=MANIFEST,
    params:
        config=config_file,
        settings=stage_params("tokenize"),
        raw=tokenize_raw_arg(),
        out=output_folder("manifest"),
    log:
        f"{DATA_LOG_DIR}/tokenize.log",
    benchmark:
        f"{DATA_LOG_DIR}/tokenize.tsv"
    threads: SETTINGS.data.num_proc
    resources:
        mem_mb=8000,
        runtime=240,
    conda:
        "../envs/adloco.yaml"
    shell:
        "adloco tokenize --config {params.config:q} {params.raw:q} --out {params.out:q}"
        " > {log:q} 2>&1"
