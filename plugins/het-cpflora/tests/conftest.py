def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that starts Flower processes (tens of "
                            "seconds); deselect with -m 'not slow'")
