# Variance analysis: batch-gradient deviations from the full gradient at the
# model the runs start from (the base model, or the initial model), tr(Sigma),
# the noise scale and the batch the norm test asks for.


rule variance:
    input:
        manifest=MANIFEST,
        base=base_input(),
    output:
        summary=report(
            f"{VARIANCE_DIR}/variance.json",
            caption="../report/variance.rst",
            category="Variance",
        ),
        per_batch=report(
            f"{VARIANCE_DIR}/per_batch.csv",
            caption="../report/variance.rst",
            category="Variance",
        ),
        # One row per draw of the scalar-vs-pooled comparison (its header alone when skipped).
        draws=f"{VARIANCE_DIR}/draws.csv",
        figure=report(
            f"{VARIANCE_DIR}/deviations.png",
            caption="../report/variance.rst",
            category="Variance",
        ),
    params:
        config=config_file,
        settings=stage_params("variance"),
        data=input_folder("manifest"),
        base=base_arg(),
        out=output_folder("summary"),
    log:
        f"{LOG_DIR}/variance.log",
    benchmark:
        f"{LOG_DIR}/benchmarks/variance.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=cluster_gpu,
        gpu_model=cluster_gpu_model,
    conda:
        "../envs/adloco.yaml"
    shell:
        "adloco variance --config {params.config:q} --data {params.data:q} {params.base:q}"
        " --out {params.out:q} --threads {threads} > {log:q} 2>&1"
