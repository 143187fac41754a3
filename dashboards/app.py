"""The pdm-replay dashboard (Streamlit). Start it with ``pdm-replay dashboard RUN_DIR``, or
``PDM_REPLAY_RUN_DIR=RUN_DIR streamlit run dashboards/app.py``.

The app ships inside the package (``pdm_replay/dashboard_app``: ``app.py`` and one script
per page under ``page_scripts/``) so that an installed ``pdm-replay`` finds it; this file runs it.
"""

from pdm_replay.dashboard_app.app import main

main()
