# Calibration of every device of cluster.devices (one job per device): the
# largest micro-batch that trains on it (unless its max_batch is fixed in the
# config) and its step-time curve for the simulated clock. A CUDA device is
# measured on a real GPU, so its job asks for one.


rule calibrate:
    input:
        manifest=MANIFEST,
        # The measured record a device's clock is mapped from (step_time.model:
        # measured_record): editing it re-runs the device's calibration.
        record=device_record_input,
    output:
        report(
            f"{CALIBRATION_DIR}/{{device}}.json",
            caption="../report/calibration.rst",
            category="Calibration",
        ),
    wildcard_constraints:
        device=DEVICE_PATTERN,
    params:
        config=config_file,
        settings=stage_params("calibrate"),
        data=input_folder("manifest"),
    log:
        f"{LOG_DIR}/calibrate/{{device}}.log",
    benchmark:
        f"{LOG_DIR}/benchmarks/calibrate/{{device}}.tsv"
    threads: calibrate_threads
    resources:
        mem_mb=calibrate_mem_mb,
        runtime=60,
        gpu=device_gpu,
        gpu_model=device_gpu_model,
    conda:
        "../envs/adloco.yaml"
    shell:
        "adloco calibrate --config {params.config:q} --data {params.data:q}"
        " --device {wildcards.device:q} --out {output:q} --threads {threads} > {log:q} 2>&1"
