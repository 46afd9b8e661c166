"""spark-submit spark/jobs/tags.py STORE... [--out DIR]"""

from spark.jobs.submit import main

if __name__ == "__main__":
    main("tags")
