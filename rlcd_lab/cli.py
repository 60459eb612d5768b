"""The ``rlcd-lab`` command line: one tyro subcommand per entry point."""

from __future__ import annotations

from dataclasses import dataclass

import tyro


@dataclass(frozen=True)
class App:
    """Serve the Gradio dashboard on the shipped default checkpoints."""

    host: str = "127.0.0.1"
    port: int = 7860

    def run(self) -> None:
        from rlcd_lab.dashboard import build_demo

        build_demo().launch(server_name=self.host, server_port=self.port)


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: ``sys.argv``) and run the chosen subcommand."""
    tyro.extras.subcommand_cli_from_dict({"app": App}, args=argv).run()


if __name__ == "__main__":
    main()
