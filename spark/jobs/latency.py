"""spark-submit spark/jobs/latency.py STORE... [--out DIR]"""

from spark.jobs.submit import main

if __name__ == "__main__":
    main("latency")
