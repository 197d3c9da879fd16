# The base model: a plain AdamW loop on the base split of the tokenized data,
# which every run of a `model.source: base` experiment starts from (and the
# variance stage analyses). Checkpoints go to results/<experiment>/checkpoints/base
# and are deliberately not an output, so a killed job resumes.


if USES_BASE:

    rule pretrain:
        input:
            manifest=MANIFEST,
        output:
            # model/ is written with them in one atomic step, and base.json holds
            # the sha256 of each of its files (a directory output would gain
            # Snakemake's timestamp file, which the checksums would refuse).
            summary=f"{BASE_DIR}/base.json",
            metrics=report(
                f"{BASE_DIR}/metrics.jsonl",
                caption="../report/pretrain.rst",
                category="Pretraining",
            ),
        params:
            config=config_file,
            settings=stage_params("pretrain"),
            data=input_folder("manifest"),
            out=output_folder("summary"),
            checkpoints=str(paths.base_checkpoint_dir(EXPERIMENT)),
            # Live TensorBoard curves, written while the job runs: no output.
            live=str(paths.base_live_dir(EXPERIMENT)),
        log:
            f"{LOG_DIR}/pretrain.log",
        benchmark:
            f"{LOG_DIR}/benchmarks/pretrain.tsv"
        threads: train_threads
        resources:
            mem_mb=4000,
            runtime=24 * 60,
            gpu=cluster_gpu,
            gpu_model=cluster_gpu_model,
        conda:
            "../envs/adloco.yaml"
        shell:
            "adloco pretrain --config {params.config:q} --data {params.data:q} --out {params.out:q}"
            " --checkpoints {params.checkpoints:q} --live {params.live:q} --threads {threads}"
            " > {log:q} 2>&1"
