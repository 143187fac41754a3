"""The dashboard's page scripts (run by ``st.navigation``; importing one renders nothing).

A package only so that installs ship the scripts with ``pdm_replay``.
"""
