# Data: C4-format records tokenized into packed shards, with a manifest that
# every later stage reads.


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
